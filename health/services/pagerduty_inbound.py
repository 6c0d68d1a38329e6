"""Acknowledgements and resolutions made in PagerDuty, read back into Hangar (docs/notifications.md,
"PagerDuty back to Hangar").

PagerDuty sends V3 webhooks (https://developer.pagerduty.com/docs/webhooks/ — "Overview" and
"Verifying Signatures"): a JSON body `{"event": {"id", "event_type", "occurred_at", "agent",
"data": {...incident...}}}`, signed in the `X-PagerDuty-Signature` header as one or more
comma-separated `v1=<hex HMAC-SHA256 of the raw body with the subscription's secret>` (several
during a secret rotation; one match is enough).

The incident in `event.data` is PagerDuty's own (`id` like `PGR0VU2`), but it carries
`incident_key`, which for an incident opened through the Events API v2 is the `dedup_key` of the
trigger: Hangar's `hangar-incident-<id>` (health.services.paging.dedup_key). That is how a
PagerDuty event finds its Hangar incident, with no REST lookup. An event without such a key (an
incident of another service on the same subscription, or one opened by hand in PagerDuty) is
not Hangar's and is ignored.

`incident.acknowledged` and `incident.resolved` go through the same services as the console's
buttons (acknowledge_page, resolve_page) with `origin="pagerduty"`, so the other paging channels
hear of it and PagerDuty is not told what it just told us. Both services are idempotent, so a
redelivered event (PagerDuty retries) changes nothing the second time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from core.errors import Invalid, NotFound
from health.models import Incident
from health.services.paging import PageStateRefused, acknowledge_page, resolve_page

MAX_BODY_BYTES = 64 * 1024  # a V3 incident event is a few KB; anything far bigger is not PagerDuty's
MAX_SIGNATURES = 8  # two during a rotation; a header of hundreds is an attack on our CPU
HANDLED = {"incident.acknowledged": "acknowledge", "incident.resolved": "resolve"}
INCIDENT_KEY = re.compile(r"^hangar-incident-(?P<pk>[0-9a-fA-F-]{32,36})$")


class UnknownIncident(NotFound):
    code = "pagerduty_incident_unknown"


class BadPagerDutyEvent(Invalid):
    pass


def signature_valid(body: bytes, header: str, secrets: tuple[str, ...]) -> bool:
    """True when one `v1=` signature of the header is the HMAC-SHA256 of `body` under one of
    `secrets` (constant-time comparisons)."""
    offered = [part.strip()[3:] for part in (header or "").split(",") if part.strip().startswith("v1=")]
    offered = offered[:MAX_SIGNATURES]
    for secret in secrets:
        expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        if any(hmac.compare_digest(expected.encode(), signature.encode()) for signature in offered):
            return True
    return False


@dataclass(frozen=True)
class Outcome:
    result: str  # acknowledged | resolved | unchanged | ignored
    detail: str
    incident: Incident | None = None


def _text(value, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def apply_event(document, *, now: datetime | None = None) -> Outcome:
    """Apply one verified V3 webhook body to Hangar's incident; see the module's docstring."""
    now = now or timezone.now()
    event = document.get("event") if isinstance(document, dict) else None
    if not isinstance(event, dict) or not isinstance(event.get("event_type"), str):
        raise BadPagerDutyEvent('Not a PagerDuty V3 webhook: the body must be {"event": {"event_type": …}}.')
    event_type = event["event_type"][:80]
    action = HANDLED.get(event_type)
    if action is None:
        return Outcome("ignored", f"{event_type} is not read back into Hangar (only {', '.join(sorted(HANDLED))}).")
    data = event.get("data") if isinstance(event.get("data"), dict) else {}
    key = _text(data.get("incident_key"), 200)
    match = INCIDENT_KEY.match(key)
    if match is None:
        return Outcome(
            "ignored", "The PagerDuty incident carries no Hangar dedup key (hangar-incident-<id>): not ours."
        )
    try:
        pk = uuid.UUID(match["pk"])
    except ValueError:
        return Outcome("ignored", "The PagerDuty incident's key names no Hangar incident id: not ours.")
    incident = Incident.objects.filter(pk=pk).first()
    if incident is None:
        raise UnknownIncident(f"No Hangar incident {pk} (PagerDuty incident key {key}); it may have been removed.")
    agent = event.get("agent") if isinstance(event.get("agent"), dict) else {}
    who = _text(agent.get("summary"), 120) or _text(agent.get("id"), 40) or "PagerDuty"
    pd_incident = _text(data.get("id"), 40)
    actor = f"pagerduty:{who}"[:200]
    via = f"PagerDuty{f' ({pd_incident})' if pd_incident else ''}"
    service = acknowledge_page if action == "acknowledge" else resolve_page
    before = (incident.page_acknowledged_at, incident.page_resolved_at)
    try:
        incident = service(incident, actor=actor, now=now, via=via, origin="pagerduty")
    except PageStateRefused as refused:
        # An acknowledgement arriving after the resolve (PagerDuty does not promise order), or an
        # incident Hangar never paged: nothing to change, and nothing PagerDuty should retry.
        return Outcome("unchanged", str(refused), incident)
    if (incident.page_acknowledged_at, incident.page_resolved_at) == before:
        return Outcome("unchanged", f"The page was already {action}d in Hangar.", incident)
    return Outcome(f"{action}d", f"Page {action}d in Hangar by {actor}.", incident)
