"""Start-up checks on tuning numbers read from the environment: a value that is not a number, or
is outside the range where the rule it tunes still means something, stops the process with the
variable's name and its allowed range instead of running the fleet on nonsense."""

from django.core.exceptions import ImproperlyConfigured


def bounded_number(env, variable: str, *, default, low, high, kind=int):
    """`kind` (int or float) read from `variable`, `default` when unset, low ≤ value ≤ high."""
    raw = env.str(variable, default="").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or value != value or not low <= value <= high:  # value != value: NaN
        what = "a whole number" if kind is int else "a number"
        raise ImproperlyConfigured(
            f"Refusing to start: {variable}={raw!r} must be {what} from {low} to {high} "
            f"(unset it for the default, {default})."
        )
    return value
