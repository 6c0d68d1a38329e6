"""The ways out the outbox's channels use: a signed webhook, a PagerDuty Events API v2 call, an
e-mail. No domain here: the apps' channels build the body and pick the destination.

Every HTTP call goes through the outbound-address guard (core.netguard, `webhook_policy()`):
HTTPS to a globally routable address, or a range an operator allowed; checked again when the
connection is made, no redirects followed.

**Signatures** (Stripe-style, docs/api.md "Webhooks"): the header

    Hangar-Signature: t=1733400000,v1=5257a869e7ec…

carries the Unix time of the attempt and the hex HMAC-SHA256, keyed with the endpoint's secret,
of `"{t}.{body}"`. A receiver recomputes it over the raw body, compares in constant time and
refuses a `t` further than the tolerance from its clock (a replayed capture is refused).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import requests
from django.conf import settings
from django.core.mail import EmailMessage, get_connection

from core.netguard import AddressRefused, NetworkPolicy, check_url, guard_session, parse_origins
from core.outbox import DeliveryFailed, Sent

SIGNATURE_HEADER = "Hangar-Signature"
USER_AGENT = "Hangar-Notifications/1"
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
# PagerDuty's severities (Events API v2: critical, error, warning, info)
PAGERDUTY_SEVERITIES = ("critical", "error", "warning", "info")


def webhook_policy() -> NetworkPolicy:
    return NetworkPolicy(
        networks=tuple(settings.NOTIFY_ALLOWED_NETWORKS),
        own_networks=tuple(getattr(settings, "CONTROL_PLANE_NETWORKS", ())),
        lab_origins=parse_origins(list(settings.NOTIFY_LAB_ORIGINS)),
        setting="NOTIFY_ALLOWED_NETWORKS",
        purpose="a webhook URL",
        public=True,
    )


def check_webhook_url(url: str) -> None:
    """Raise AddressRefused (a 400 with the reason) unless the guard allows `url`."""
    check_url(url, webhook_policy())


def body_bytes(document: dict) -> bytes:
    """The one serialisation of a body: the same document is the same bytes (a replay is identical)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), default=str).encode()


def sign(secret: str, body: bytes, *, timestamp: int) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify_signature(secret: str, header: str, body: bytes, *, tolerance_s: int, now: float | None = None) -> bool:
    """What a receiver does (and the tests' receiver does): parse, check the age, compare."""
    now = time.time() if now is None else now
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
    except (ValueError, KeyError):
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = sign(secret, body, timestamp=timestamp).split("v1=", 1)[1]
    return any(hmac.compare_digest(expected, v) for k, v in (p.split("=", 1) for p in header.split(",")) if k == "v1")


def _session() -> requests.Session:
    session = requests.Session()
    guard_session(session, webhook_policy())
    return session


def post(url: str, body: bytes, *, headers: dict[str, str]) -> Sent:
    """POST `body`; a 2xx is delivered, anything else a failure (4xx other than 408/429: the
    receiver refuses this request as such, retrying will not help)."""
    try:
        check_webhook_url(url)
    except AddressRefused as exc:
        raise DeliveryFailed(exc.detail, permanent=True) from None
    try:
        with _session() as session:
            response = session.post(
                url,
                data=body,
                headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers},
                timeout=settings.NOTIFY_HTTP_TIMEOUT_S,
                allow_redirects=False,
            )
    except requests.RequestException as exc:
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}"[:500]) from None
    text = response.text[:200]
    if 200 <= response.status_code < 300:
        return Sent(response.status_code, text)
    permanent = 400 <= response.status_code < 500 and response.status_code not in (408, 409, 425, 429)
    raise DeliveryFailed(f"HTTP {response.status_code}: {text}", status_code=response.status_code, permanent=permanent)


def post_signed(url: str, secret: str, document: dict, *, headers: dict[str, str] | None = None) -> Sent:
    body = body_bytes(document)
    signature = sign(secret, body, timestamp=int(time.time()))
    return post(url, body, headers={SIGNATURE_HEADER: signature, **(headers or {})})


def pagerduty_event(
    *,
    url: str,
    routing_key: str,
    action: str,
    dedup_key: str,
    summary: str = "",
    source: str = "hangar",
    severity: str = "error",
    link: str = "",
    details: dict | None = None,
) -> Sent:
    """PagerDuty Events API v2 (https://developer.pagerduty.com/docs/events-api-v2/trigger-events/):
    trigger carries the payload; acknowledge and resolve name the dedup_key only."""
    document: dict = {"routing_key": routing_key, "event_action": action, "dedup_key": dedup_key}
    if action == "trigger":
        document["payload"] = {
            "summary": summary[:1024],
            "source": source,
            "severity": severity if severity in PAGERDUTY_SEVERITIES else "error",
            "custom_details": details or {},
        }
        if link:
            document["links"] = [{"href": link, "text": "Open in Hangar"}]
        document["client"] = "Hangar"
    return post(url or PAGERDUTY_EVENTS_URL, body_bytes(document), headers={})


def send_email(*, recipients: list[str], subject: str, text: str, headers: dict[str, str] | None = None) -> Sent:
    """One message through Django's mail backend (NOTIFY_EMAIL_BACKEND: SMTP in production)."""
    if not recipients:
        raise DeliveryFailed("no recipients", permanent=True)
    connection = get_connection(settings.NOTIFY_EMAIL_BACKEND, fail_silently=False)
    message = EmailMessage(
        subject=subject[:200].replace("\n", " "),
        body=text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=recipients,
        headers=headers or {},
        connection=connection,
    )
    sent = message.send()
    if not sent:
        raise DeliveryFailed("the mail server accepted no message")
    return Sent(None, f"sent to {len(recipients)} recipient(s)")
