"""RFC 9457 problem+json for every API error.

Every error the API answers has `type`, `title`, `status`, `detail` and a stable snake_case
`code`; validation failures add `errors: [{field, message}]`. Views raise `Problem` (or a DRF
exception) and the handler below renders it.
"""

import logging
import sys

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpResponse, JsonResponse
from django.views.defaults import page_not_found, server_error
from rest_framework import exceptions
from rest_framework.response import Response

from core.errors import Conflict, DomainError, Invalid, NotFound, Refused
from core.outages import is_outage
from core.problem_types import type_uri

logger = logging.getLogger(__name__)

PROBLEM_CONTENT_TYPE = "application/problem+json"

_TITLES = {
    400: "Bad request",
    401: "Authentication required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    406: "Not acceptable",
    409: "Conflict",
    413: "Content too large",
    415: "Unsupported media type",
    422: "Unprocessable content",
    429: "Too many requests",
    500: "Internal server error",
    503: "Service unavailable",
}


class Problem(exceptions.APIException):
    """An API error with a stable code: `raise Problem(409, "insufficient_capacity", "...")`."""

    def __init__(
        self,
        status_code: int,
        code: str,
        detail: str,
        *,
        errors: list[dict] | None = None,
        headers: dict | None = None,
        extra: dict | None = None,
    ):
        self.status_code = status_code
        self.code = code
        self.errors = errors
        self.headers = headers or {}
        self.extra = extra or {}
        super().__init__(detail=detail, code=code)


def problem_body(
    status_code: int, code: str, detail: str, *, errors: list[dict] | None = None, extra: dict | None = None
) -> dict:
    body = {
        "type": type_uri(code),  # a page of this server: /docs/problems/<code>
        "title": _TITLES.get(status_code, "Error"),
        "status": status_code,
        "detail": detail,
        "code": code,
    }
    if errors is not None:
        body["errors"] = errors
    if extra:
        body.update(extra)
    return body


def problem_response(status_code: int, code: str, detail: str, **kwargs) -> Response:
    headers = kwargs.pop("headers", None)
    return Response(
        problem_body(status_code, code, detail, **kwargs),
        status=status_code,
        headers=headers,
        content_type=PROBLEM_CONTENT_TYPE,
    )


def _flatten_errors(detail, prefix: str = "") -> list[dict]:
    """DRF's nested error dict → [{field, message}] with dotted field paths."""
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            field = f"{prefix}.{key}" if prefix else str(key)
            if key == "non_field_errors":
                field = prefix or "non_field_errors"
            out.extend(_flatten_errors(value, field))
        return out
    if isinstance(detail, list):
        out = []
        for index, item in enumerate(detail):
            if isinstance(item, (dict, list)):
                out.extend(_flatten_errors(item, f"{prefix}[{index}]"))
            else:
                out.append({"field": prefix or "non_field_errors", "message": str(item)})
        return out
    return [{"field": prefix or "non_field_errors", "message": str(detail)}]


# The one mapping from a domain error's kind to its HTTP status.
DOMAIN_STATUS = ((NotFound, 404), (Invalid, 400), (Refused, 403), (Conflict, 409))


def domain_problem(exc: DomainError) -> Response:
    status = next((code for kind, code in DOMAIN_STATUS if isinstance(exc, kind)), 400)
    return problem_response(status, exc.code, exc.detail, extra=exc.extra or None)


def problem_exception_handler(exc, context):
    """DRF EXCEPTION_HANDLER: every exception a view raises becomes problem+json."""
    if is_outage(exc):
        return unavailable_response(context["request"], exc)
    if isinstance(exc, DomainError):
        return domain_problem(exc)
    if isinstance(exc, Problem):
        return problem_response(
            exc.status_code, exc.code, str(exc.detail), errors=exc.errors, extra=exc.extra, headers=exc.headers
        )
    if isinstance(exc, Http404):
        return problem_response(404, "not_found", "No such object. Check the id, or list the collection to find it.")
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, DjangoValidationError):
        messages = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        return problem_response(
            400, "validation_error", "Some fields are invalid; see errors.", errors=_flatten_errors(messages)
        )
    if isinstance(exc, exceptions.ValidationError):
        return problem_response(
            400, "validation_error", "Some fields are invalid; see errors.", errors=_flatten_errors(exc.detail)
        )
    if isinstance(exc, exceptions.ParseError):
        return problem_response(400, "parse_error", f"The request body could not be parsed: {exc.detail}")
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return problem_response(415, "unsupported_media_type", f"{exc.detail} Send the body as application/json.")
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        return problem_response(
            401,
            "not_authenticated",
            f"{exc.detail} Send 'Authorization: Bearer <token>' with a valid token.",
            headers={"WWW-Authenticate": 'Bearer realm="hangar"'},
        )
    if isinstance(exc, exceptions.PermissionDenied):
        return problem_response(403, "forbidden", str(exc.detail))
    if isinstance(exc, exceptions.NotFound):
        return problem_response(404, "not_found", str(exc.detail))
    if isinstance(exc, exceptions.MethodNotAllowed):
        return problem_response(405, "method_not_allowed", str(exc.detail))
    if isinstance(exc, exceptions.NotAcceptable):
        return problem_response(406, "not_acceptable", str(exc.detail))
    if isinstance(exc, exceptions.Throttled):
        wait = int(exc.wait or 1)
        return problem_response(
            429, "throttled", f"Too many requests; retry in {wait} s.", headers={"Retry-After": str(wait)}
        )
    if isinstance(exc, exceptions.APIException):
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else "error"
        return problem_response(exc.status_code, code, str(exc.detail))
    return None


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def api_not_found(request, exception=None):
    """handler404: problem+json under /api/, the console's page elsewhere."""
    if _is_api(request) or request.path == "/metrics":
        body = problem_body(404, "not_found", f"No endpoint at {request.path}. See /api/v1/docs for the API.")
        return JsonResponse(body, status=404, content_type=PROBLEM_CONTENT_TYPE)

    return page_not_found(request, exception)


def api_server_error(request):
    """handler500: even an unexpected failure answers problem+json under /api/; a down
    database or broker (raised anywhere, middleware included) answers 503, not 500."""
    exc = sys.exc_info()[1]
    if is_outage(exc):
        return unavailable_response(request, exc)
    if _is_api(request):
        body = problem_body(
            500, "internal_error", "The server failed to handle this request; it has been logged. Retry later."
        )
        return JsonResponse(body, status=500, content_type=PROBLEM_CONTENT_TYPE)

    return server_error(request)


def unavailable_response(request, exc: BaseException):
    """503 for a down database or broker: problem+json under /api/ and /metrics, a page that
    reloads itself elsewhere; `Retry-After` on both."""
    wait = str(settings.OUTAGE_RETRY_AFTER_S)
    logger.warning("dependency unavailable on %s %s: %s", request.method, request.path, exc)
    detail = (
        f"A service this request needs (database or message broker) is unavailable right now; "
        f"nothing was changed. Retry in {wait} s."
    )
    if _is_api(request) or request.path == "/metrics":
        response = JsonResponse(
            problem_body(503, "service_unavailable", detail), status=503, content_type=PROBLEM_CONTENT_TYPE
        )
    else:
        response = HttpResponse(
            f'<!doctype html><title>Hangar: temporarily unavailable</title><meta http-equiv="refresh" '
            f'content="{wait}"><h1>Temporarily unavailable</h1><p>{detail}</p><p>This page reloads by itself.</p>',
            status=503,
            content_type="text/html; charset=utf-8",
        )
    response["Retry-After"] = wait
    return response
