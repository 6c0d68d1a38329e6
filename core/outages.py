"""A dependency that is down is an outage to wait out, not a server bug.

When PostgreSQL (either database) or the broker cannot be reached, every API answers `503`
problem+json (`code: service_unavailable`) with `Retry-After`, and every console page a short
503 page with the same header, instead of `500 internal_error`. Three places catch it, so no
path is left out: the DRF exception handler (API views), `OutageMiddleware.process_exception`
(console views) and handler500 (anything raised in middleware); all three answer with
core.api.problems.unavailable_response.
"""

from django.db import InterfaceError, OperationalError


def _broker_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = []
    try:
        from kombu.exceptions import OperationalError as KombuOperationalError

        errors.append(KombuOperationalError)
    except ImportError:  # kombu comes with Celery; a web-only install may lack it
        pass
    try:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        errors += [RedisConnectionError, RedisTimeoutError]
    except ImportError:
        pass
    return tuple(errors)


OUTAGE_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError, *_broker_errors())


def is_outage(exc: BaseException | None) -> bool:
    return isinstance(exc, OUTAGE_ERRORS)
