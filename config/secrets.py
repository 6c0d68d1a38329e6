"""The start-up check on secrets: without DEBUG, a missing or development key stops the process
with the name of the variable to set, instead of serving on a key anyone can read here."""
from django.core.exceptions import ImproperlyConfigured

MIN_KEY_LENGTH = 32


def _problem(variable: str, value: str, development_keys: tuple[str, ...]) -> str | None:
    if not value:
        return f"{variable} is not set"
    if value in development_keys:
        return f"{variable} is the development key shipped in the source"
    if len(value) < MIN_KEY_LENGTH:
        return f"{variable} is shorter than {MIN_KEY_LENGTH} characters"
    return None


def require_production_secrets(*, secret_key: str, agent_token_key: str, development_keys: tuple[str, ...]) -> None:
    problems = [p for p in (_problem("SECRET_KEY", secret_key, development_keys),
                            _problem("AGENT_TOKEN_KEY", agent_token_key, development_keys)) if p]
    if secret_key and secret_key == agent_token_key:
        problems.append("AGENT_TOKEN_KEY equals SECRET_KEY; give agent tokens their own key")
    if problems:
        raise ImproperlyConfigured(
            "Refusing to start with DEBUG off: " + "; ".join(problems) + ". Set each to its own random value, "
            "e.g. `python -c 'import secrets; print(secrets.token_urlsafe(50))'`, in the environment or .env "
            "(or set DEBUG=true on a development machine).")
