"""The start-up check on secrets: without DEBUG, a missing or development key stops the process
with the name of the variable to set, instead of serving on a key anyone can read here."""

from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

MIN_KEY_LENGTH = 32


MIN_DISTINCT_CHARACTERS = 8  # "a" × 40 or "0123" × 10 is long and still guessable


def _problem(variable: str, value: str, development_keys: tuple[str, ...]) -> str | None:
    stripped = (value or "").strip()
    if not stripped:
        return f"{variable} is not set" if not value else f"{variable} is only whitespace"
    if stripped in {k.strip() for k in development_keys}:
        return f"{variable} is the development key shipped in the source"
    if stripped != value:
        return f"{variable} starts or ends with whitespace (a copy-paste slip?)"
    if len(value) < MIN_KEY_LENGTH:
        return f"{variable} is shorter than {MIN_KEY_LENGTH} characters"
    if len(set(value)) < MIN_DISTINCT_CHARACTERS:
        return f"{variable} has fewer than {MIN_DISTINCT_CHARACTERS} different characters; use a random value"
    return None


def require_production_secrets(secrets: dict[str, str], *, development_keys: tuple[str, ...]) -> None:
    """`secrets` maps each variable name to its value; each must be set, long, not a
    development key, and different from every other."""
    problems = [p for p in (_problem(name, value, development_keys) for name, value in secrets.items()) if p]
    names = list(secrets)
    for i, name in enumerate(names):
        for other in names[:i]:
            if secrets[name] and secrets[name] == secrets[other]:
                problems.append(f"{name} equals {other}; give each its own key")
    if problems:
        raise ImproperlyConfigured(
            "Refusing to start with DEBUG off: " + "; ".join(problems) + ". Set each to its own random value, "
            "e.g. `python -c 'import secrets; print(secrets.token_urlsafe(50))'`, in the environment or .env "
            "(or set DEBUG=true on a development machine)."
        )


def require_fernet_keys(variable: str, value: str, *, development_key: str) -> None:
    """`value` is one Fernet key or several, comma-separated (rotation): each must be one."""
    if not value.strip():
        raise ImproperlyConfigured(f"Refusing to start with DEBUG off: {variable} is not set.")
    for key in (k.strip() for k in value.split(",")):
        if key == development_key.strip():
            raise ImproperlyConfigured(f"Refusing to start with DEBUG off: {variable} is the development key.")
        try:
            Fernet(key)
        except ValueError:
            raise ImproperlyConfigured(
                f"Refusing to start with DEBUG off: {variable} is not a Fernet key (32 url-safe base64-encoded "
                "bytes). Make one with `python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'`."
            ) from None
