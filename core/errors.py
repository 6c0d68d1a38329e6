"""Domain errors: what services raise when a rule of the domain refuses a request.

Services know nothing of HTTP. Each error names its kind (the subclass) and a stable
snake_case ``code``; the mapping from kind to HTTP status lives in one place,
``core/api/problems.py``, which renders every DomainError as problem+json.
"""


class DomainError(Exception):
    """Base of every domain refusal. ``detail`` is written for the person who sent the request
    and says what to do next; ``extra`` carries machine-readable context (e.g. the drives that
    lack sanitisation)."""

    code = "domain_error"

    def __init__(self, detail: str, *, code: str | None = None, extra: dict | None = None):
        self.detail = detail
        if code is not None:
            self.code = code
        self.extra = extra or {}
        super().__init__(detail)


class NotFound(DomainError):
    """The object does not exist, or the caller may not know that it does."""

    code = "not_found"


class Invalid(DomainError):
    """The request contradicts a rule of the domain (a value out of range, an impossible selection)."""

    code = "validation_error"


class Refused(DomainError):
    """The caller may not do this: a quota, a role or a permission says no."""

    code = "forbidden"


class Conflict(DomainError):
    """The request is valid, but the current state of the objects does not allow it now."""

    code = "conflict"
