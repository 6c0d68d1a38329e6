"""Request id: taken from X-Request-ID when a proxy set one, otherwise minted; echoed back
and recorded on every audit row written during the request."""

import re
import time
import uuid

from django.conf import settings
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessageMiddleware
from django.http import HttpResponse, HttpResponseBadRequest, JsonResponse

from core.api.problems import PROBLEM_CONTENT_TYPE, problem_body, unavailable_response
from core.api.routes import AGENT_API_PREFIX

from .context import request_id_var
from .metrics import REQUEST_LATENCY
from .outages import is_outage

_VALID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get("X-Request-ID", "")
        request_id = incoming if _VALID.match(incoming) else uuid.uuid4().hex
        request.request_id = request_id
        token = request_id_var.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response["X-Request-ID"] = request_id
        return response


class RequestLatencyMiddleware:
    """Feeds hangar_http_request_duration_seconds. The route label is the URL pattern
    (e.g. `/fleet/racks/<str:rack_id>/`), never the raw path, so ids cannot explode the series count.

    The same figure goes back to the caller as `Server-Timing: app;dur=<ms>` (the W3C header a
    browser's network panel shows): a client that sees a slow answer can tell the time the
    application spent on it from the time the request queued before a worker took it, or waited
    in the client itself. The fleet simulator's verdict rests on that split."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):

        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = ("/" + match.route) if match is not None else "unmatched"
        elapsed = time.perf_counter() - started
        REQUEST_LATENCY.labels(method=request.method, route=route, status=str(response.status_code)).observe(elapsed)
        response["Server-Timing"] = f"app;dur={elapsed * 1000:.1f}"
        return response


class RejectNulCharactersMiddleware:
    """A NUL character in the path or query string can never match stored text, and PostgreSQL
    refuses it outright (a database error, i.e. a 500); answer a clear 400 before any view runs."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or any(
            "\x00" in key or any("\x00" in v for v in values) for key, values in request.GET.lists()
        ):
            detail = "The URL contains a NUL (%00) character; remove it and retry."
            if request.path.startswith("/api/"):
                return JsonResponse(
                    problem_body(
                        400,
                        "validation_error",
                        detail,
                        errors=[{"field": "query", "message": "contains a NUL character"}],
                    ),
                    status=400,
                    content_type=PROBLEM_CONTENT_TYPE,
                )
            return HttpResponseBadRequest(detail)
        return self.get_response(request)


class OutageMiddleware:
    """Console views (anything DRF does not handle) that hit a down database or broker answer
    503 with Retry-After instead of 500 (core.outages)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        return unavailable_response(request, exception) if is_outage(exception) else None


class RequestBodyLimitMiddleware:
    """A body larger than settings.DATA_UPLOAD_MAX_MEMORY_SIZE is refused with 413 before
    anything reads it (under /api/ as problem+json), instead of Django's HTML 400 the first
    time a view touches request.body."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if limit is not None and length > limit:
            detail = (
                f"The request body is {length} bytes; the limit is {limit} bytes. "
                "Send less per request (split the batch)."
            )
            if request.path.startswith("/api/"):
                return JsonResponse(
                    problem_body(413, "payload_too_large", detail, extra={"limit_bytes": limit}),
                    status=413,
                    content_type=PROBLEM_CONTENT_TYPE,
                )
            return HttpResponse(detail, status=413, content_type="text/plain")
        return self.get_response(request)


class MessageMiddleware(DjangoMessageMiddleware):
    """Django's flash messages, except for node agents: no agent request shows one, and making
    the message storage (a class imported by name, a cookie and a session backend) was ~35 µs
    of every heartbeat and desired-state poll, a thirtieth of their CPU on the 2-core VM."""

    def process_request(self, request):
        if not request.path_info.startswith(AGENT_API_PREFIX):
            super().process_request(request)
