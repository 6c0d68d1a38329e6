"""Health's part of the notification outbox: where operator pages go, and how each paging
channel sends one (registered with core.outbox from HealthConfig.ready()).

Routing: `incident.trigger` → the enabled primary channels whose minimum severity the incident
reaches; `incident.escalate` → the one escalation channel named in the event; acknowledge and
resolve → every channel that was paged (triggered or escalated) for the incident, so a tool is
never told to resolve what it never heard of, except PagerDuty when the change came from it; `paging.test` → the channel tested.
"""

from __future__ import annotations

from core.models import OutboxDelivery, OutboxEvent
from core.outbox import DeliveryFailed, Sent, register_channel, register_router
from core.transports import pagerduty_event, post_signed, send_email
from health.choices import SEVERITY_RANK, PagingKind, PagingTier
from health.models import PagingChannel

CHANNEL_OF_KIND = {
    PagingKind.PAGERDUTY: "paging-pagerduty",
    PagingKind.WEBHOOK: "paging-webhook",
    PagingKind.EMAIL: "paging-email",
}
PAGING_CHANNELS = tuple(CHANNEL_OF_KIND.values())
# Hangar's severities in PagerDuty's four (Events API v2)
PAGERDUTY_SEVERITY = {
    "fatal": "critical",
    "repair": "critical",
    "reboot": "error",
    "reset": "error",
    "hold": "error",  # a person must decide: the tenant keeps the node until they do
    "defer": "warning",  # the reset waits for the node's next release
    "warn": "warning",
    "info": "info",
}
PAGERDUTY_ACTION = {"trigger": "trigger", "escalate": "trigger", "acknowledge": "acknowledge", "resolve": "resolve"}


def _destination(channel: PagingChannel) -> tuple[str, str]:
    return CHANNEL_OF_KIND[channel.kind], str(channel.pk)


def route_operator_events(event: OutboxEvent):
    if event.audience != "operators":
        return []
    payload = event.payload or {}
    if event.topic == "paging.test":
        channel = PagingChannel.objects.filter(pk=payload.get("channel")).first()
        return [_destination(channel)] if channel else []
    if event.topic == "incident.trigger":
        rank = SEVERITY_RANK.get(payload.get("severity"), 0)
        return [
            _destination(c)
            for c in PagingChannel.objects.filter(enabled=True, tier=PagingTier.PRIMARY)
            if SEVERITY_RANK[c.min_severity] <= rank
        ]
    if event.topic == "incident.escalate":
        channel = PagingChannel.objects.filter(pk=payload.get("channel"), enabled=True).first()
        return [_destination(channel)] if channel else []
    if event.topic in ("incident.acknowledge", "incident.resolve"):
        paged = OutboxDelivery.objects.filter(
            event__subject=event.subject,
            event__topic__in=("incident.trigger", "incident.escalate"),
            channel__in=PAGING_CHANNELS,
            replay_of__isnull=True,
        ).values_list("channel", "target")
        # An acknowledgement or resolution that came from PagerDuty is not echoed back to it.
        echo = "paging-pagerduty" if payload.get("origin") == "pagerduty" else None
        return [destination for destination in dict.fromkeys(paged) if destination[0] != echo]
    return []


def _channel(target: str) -> PagingChannel:
    channel = PagingChannel.objects.filter(pk=target).first()
    if channel is None:
        raise DeliveryFailed("the paging channel was removed", permanent=True)
    return channel


def _action(event: OutboxEvent) -> str:
    return event.topic.rsplit(".", 1)[-1]


def webhook_document(event: OutboxEvent) -> dict:
    """The generic webhook's body: the event id (receivers de-duplicate on it), its type, the
    incident's dedup key and what happened."""
    return {
        "id": str(event.pk),
        "type": event.topic,
        "created": event.created_at.isoformat(),
        "dedup_key": (event.payload or {}).get("dedup_key", ""),
        "data": event.payload,
    }


def send_pagerduty(delivery: OutboxDelivery, event: OutboxEvent) -> Sent:
    channel = _channel(delivery.target)
    payload = event.payload or {}
    action = "trigger" if event.topic == "paging.test" else PAGERDUTY_ACTION.get(_action(event), "trigger")
    nodes = payload.get("nodes") or []
    return pagerduty_event(
        url=channel.url,
        routing_key=channel.secret,
        action=action,
        dedup_key=payload.get("dedup_key", str(event.pk)),
        summary=f"[{payload.get('severity', '')}] {payload.get('title', '')}",
        source=payload.get("scope_key") or (nodes[0] if nodes else "hangar"),
        severity=PAGERDUTY_SEVERITY.get(payload.get("severity"), "error"),
        link=payload.get("url", ""),
        details={
            k: payload.get(k)
            for k in ("likely_cause", "nodes", "nodes_total", "tenants_affected", "state")
            if k in payload
        },
    )


def send_webhook(delivery: OutboxDelivery, event: OutboxEvent) -> Sent:
    channel = _channel(delivery.target)
    return post_signed(channel.url, channel.secret, webhook_document(event), headers={"Hangar-Event": event.topic})


def email_text(event: OutboxEvent) -> tuple[str, str]:
    payload = event.payload or {}
    action = _action(event).upper()
    subject = f"[Hangar {action}] {payload.get('severity', '')}: {payload.get('title', '')}"
    lines = [
        f"{action}: {payload.get('title', '')}",
        "",
        f"Severity: {payload.get('severity', '')}",
        f"State: {payload.get('state', '')}",
    ]
    if payload.get("likely_cause"):
        lines.append(f"Likely cause: {payload['likely_cause']}")
    if payload.get("nodes"):
        shown = ", ".join(payload["nodes"][:20])
        more = payload.get("nodes_total", 0) - min(20, len(payload["nodes"]))
        lines.append(f"Nodes ({payload.get('nodes_total')}): {shown}{f' and {more} more' if more > 0 else ''}")
    if payload.get("tenants_affected"):
        lines.append(f"Tenants affected: {', '.join(payload['tenants_affected'])}")
    if payload.get("acknowledged_by"):
        lines.append(f"Acknowledged by: {payload['acknowledged_by']}")
    lines += ["", f"Open it: {payload.get('url', '')}", f"Dedup key: {payload.get('dedup_key', '')}"]
    return subject, "\n".join(lines) + "\n"


def send_email_page(delivery: OutboxDelivery, event: OutboxEvent) -> Sent:
    channel = _channel(delivery.target)
    subject, text = email_text(event)
    recipients = [r.strip() for r in channel.recipients.split(",") if r.strip()]
    return send_email(
        recipients=recipients,
        subject=subject,
        text=text,
        headers={"X-Hangar-Dedup-Key": (event.payload or {}).get("dedup_key", ""), "X-Hangar-Event": event.topic},
    )


def describe(target: str) -> str:
    channel = PagingChannel.objects.filter(pk=target).first()
    return channel.name if channel else f"removed channel {target}"


def register() -> None:
    register_router(route_operator_events)
    register_channel("paging-pagerduty", send_pagerduty, describe)
    register_channel("paging-webhook", send_webhook, describe)
    register_channel("paging-email", send_email_page, describe)
