"""Request id: taken from X-Request-ID when a proxy set one, otherwise minted; echoed back
and recorded on every audit row written during the request."""
import re
import time
import uuid

from .context import request_id_var

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
    (e.g. `/fleet/racks/<str:rack_id>/`), never the raw path, so ids cannot explode the series count."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        from .metrics import REQUEST_LATENCY

        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = ("/" + match.route) if match is not None else "unmatched"
        REQUEST_LATENCY.labels(method=request.method, route=route, status=str(response.status_code)).observe(
            time.perf_counter() - started)
        return response
