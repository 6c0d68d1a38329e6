"""Request id: taken from X-Request-ID when a proxy set one, otherwise minted; echoed back
and recorded on every audit row written during the request."""

import ipaddress
import logging
import re
import secrets
import time
import uuid

from django.conf import settings
from django.contrib.auth import logout
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessageMiddleware
from django.http import HttpResponse, HttpResponseBadRequest, JsonResponse
from django.urls import reverse

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


# ---- proxies, sessions, headers, sign-in input -----------------------------------------------

FORWARDED_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_HOST", "HTTP_FORWARDED")
log = logging.getLogger(__name__)
_warned_untrusted_proxy = False


def _from_trusted_proxy(address: str) -> bool:
    try:
        peer = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(peer in network for network in settings.TRUSTED_PROXIES if network.version == peer.version)


class ForwardedHeadersMiddleware:
    """Forwarded headers count only when a trusted proxy (settings.TRUSTED_PROXIES) sent the
    request: from anyone else they are removed before anything reads them, so a client that
    reaches the web server directly can claim neither HTTPS (X-Forwarded-Proto) nor another
    address (X-Forwarded-For). The first such header seen while NUM_PROXIES is 0 is logged: a
    proxy seems to be in front and every client behind it shares its address for the login
    limits and API budgets until NUM_PROXIES and TRUSTED_PROXIES say so."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        meta = request.META
        present = [h for h in FORWARDED_HEADERS if h in meta]
        if present and not _from_trusted_proxy(meta.get("REMOTE_ADDR", "")):
            for header in present:
                del meta[header]
            global _warned_untrusted_proxy
            if not settings.NUM_PROXIES and not _warned_untrusted_proxy:
                _warned_untrusted_proxy = True
                log.warning(
                    "A request from %s carried %s but NUM_PROXIES is 0: the header is ignored. If a proxy is in "
                    "front, set NUM_PROXIES and TRUSTED_PROXIES (docs/deployment.md), or every client behind it "
                    "shares one address for sign-in limits and API budgets.",
                    meta.get("REMOTE_ADDR", "?"),
                    ", ".join(h.removeprefix("HTTP_").replace("_", "-") for h in present),
                )
        return self.get_response(request)


IDLE_KEY = "_hangar_last_seen"
IDLE_WRITE_EVERY = 60  # seconds: the last visit is written at most once a minute


class IdleSessionMiddleware:
    """Signs a console session out after settings.SESSION_IDLE_SECONDS without a visit. A visit
    is a request that is not a background refresh (a dashboard's fetch for JSON), so a screen
    left open does not keep itself signed in."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and hasattr(request, "session"):
            now = int(time.time())
            last = request.session.get(IDLE_KEY)
            if last is not None and now - last > settings.SESSION_IDLE_SECONDS:
                logout(request)
            elif not _background(request) and (last is None or now - last >= IDLE_WRITE_EVERY):
                request.session[IDLE_KEY] = now
        return self.get_response(request)


def start_idle_clock(sender, request, user, **kwargs):
    """At sign-in, so a fresh session's first page writes nothing more (user_logged_in)."""
    if request is not None and hasattr(request, "session"):
        request.session[IDLE_KEY] = int(time.time())


def _background(request) -> bool:
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept


CSP = (
    "default-src 'self'; script-src 'self' 'nonce-{nonce}'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'none'"
)


class SecurityHeadersMiddleware:
    """A Content-Security-Policy on every page (scripts only from this site or carrying the
    request's nonce, `request.csp_nonce`, which templates put on their inline scripts), and
    `Cache-Control: no-store` on every answer to a signed-in user or a bearer token, so no
    shared cache or back button keeps a tenant's or an operator's data. The API's Swagger page
    (/api/v1/docs, sidecar assets with inline scripts) keeps its own way."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.csp_nonce = secrets.token_urlsafe(16)
        response = self.get_response(request)
        content_type = response.get("Content-Type", "")
        if content_type.startswith("text/html") and not request.path_info.startswith("/api/"):
            response.setdefault("Content-Security-Policy", CSP.format(nonce=request.csp_nonce))
        user = getattr(request, "user", None)
        signed_in = user is not None and getattr(user, "is_authenticated", False)
        if signed_in or "HTTP_AUTHORIZATION" in request.META:
            response["Cache-Control"] = "no-store"
        return response


class LoginInputMiddleware:
    """A sign-in with a username longer than any account's is a clear 400 before anything looks
    it up (it used to reach the lockout table's 255-character column and answer 500)."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.paths: set[str] | None = None

    def __call__(self, request):
        if request.method == "POST":
            if self.paths is None:
                self.paths = {reverse("login"), reverse("admin:login")}
            if request.path_info in self.paths:
                username = request.POST.get("username", "")
                if len(username) > settings.LOGIN_MAX_USERNAME_LENGTH:
                    return HttpResponseBadRequest(
                        f"A username is at most {settings.LOGIN_MAX_USERNAME_LENGTH} characters.",
                        content_type="text/plain",
                    )
        return self.get_response(request)
