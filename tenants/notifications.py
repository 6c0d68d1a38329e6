"""Tenant notifications: the event catalogue, how an event reaches a tenant's webhook endpoints
and e-mail recipients (router and channels registered with core.outbox from
TenantsConfig.ready()), and `emit_tenant_event`, which the tenants and billing services call in
the transaction of the change (docs/api.md, "Webhooks").

An event's audience is `tenant:<id>`: the router sends it only to that tenant's endpoints and
recipients subscribed to its type, so a tenant never receives another tenant's events.
"""

from __future__ import annotations

from datetime import datetime

from core.models import OutboxDelivery, OutboxEvent
from core.outbox import DeliveryFailed, Sent, emit, register_channel, register_router
from core.transports import post_signed, send_email
from tenants.models import EmailRecipient, WebhookEndpoint

# The catalogue (docs/api.md keeps the same list; a test compares them).
EVENT_TYPES: dict[str, str] = {
    "allocation.active": "every node of the allocation is provisioned; it is yours to use",
    "allocation.degraded": "a node was pulled from the allocation for health; a replacement is being placed",
    "allocation.node_replaced": "a replacement node joined the allocation",
    "allocation.released": "the allocation ended: its nodes are stopped and wiped",
    "invoice.finalized": "an invoice was finalized (numbered, due)",
    "credit_note.issued": "a credit note was issued against one of your invoices",
}
MAX_ENDPOINTS = 10
MAX_RECIPIENTS = 20
WEBHOOK = "tenant-webhook"
EMAIL = "tenant-email"


def audience(tenant_id) -> str:
    return f"tenant:{tenant_id}"


def emit_tenant_event(
    *, tenant_id, event_type: str, dedup_key: str, data: dict, now: datetime | None = None
) -> OutboxEvent | None:
    """Record the event in the current transaction (core.outbox.emit)."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"{event_type} is not in the event catalogue")
    return emit(
        topic=event_type,
        dedup_key=f"tenant:{tenant_id}:{dedup_key}",
        payload={"tenant": str(tenant_id), "data": data},
        audience=audience(tenant_id),
        subject=str(data.get("allocation") or data.get("invoice") or ""),
        now=now,
    )


def route_tenant_events(event: OutboxEvent):
    if not event.audience.startswith("tenant:"):
        return []
    tenant_id = event.audience.split(":", 1)[1]
    out = []
    for pk, types in WebhookEndpoint.objects.filter(tenant_id=tenant_id, enabled=True).values_list("pk", "event_types"):
        if event.topic in (types or []):
            out.append((WEBHOOK, str(pk)))
    for pk, types in EmailRecipient.objects.filter(tenant_id=tenant_id, enabled=True).values_list("pk", "event_types"):
        if event.topic in (types or []):
            out.append((EMAIL, str(pk)))
    return out


def webhook_document(event: OutboxEvent) -> dict:
    """The body a tenant endpoint receives: the same bytes on every attempt and every replay."""
    payload = event.payload or {}
    return {
        "id": str(event.pk),
        "type": event.topic,
        "created": event.created_at.isoformat(),
        "tenant": payload.get("tenant"),
        "data": payload.get("data", {}),
    }


def _mine(model, delivery: OutboxDelivery):
    row = model.objects.filter(pk=delivery.target).first()
    if row is None or delivery.audience != audience(row.tenant_id):
        raise DeliveryFailed("the endpoint was removed", permanent=True)
    return row


def send_webhook(delivery: OutboxDelivery, event: OutboxEvent) -> Sent:
    endpoint = _mine(WebhookEndpoint, delivery)
    return post_signed(
        endpoint.url,
        endpoint.secret,
        webhook_document(event),
        headers={"Hangar-Event": event.topic, "Hangar-Event-Id": str(event.pk)},
    )


def send_mail(delivery: OutboxDelivery, event: OutboxEvent) -> Sent:
    recipient = _mine(EmailRecipient, delivery)
    data = (event.payload or {}).get("data", {})
    lines = [f"{event.topic}: {EVENT_TYPES.get(event.topic, '')}", ""]
    lines += [f"{key}: {value}" for key, value in sorted(data.items())]
    lines += ["", f"Event id: {event.pk}"]
    title = data.get("name") or data.get("number") or data.get("allocation") or ""
    return send_email(
        recipients=[recipient.email],
        subject=f"[Hangar] {event.topic} {title}",
        text="\n".join(lines) + "\n",
        headers={"X-Hangar-Event": event.topic, "X-Hangar-Event-Id": str(event.pk)},
    )


def _describe(model):
    def describe(target: str) -> str:
        row = model.objects.filter(pk=target).first()
        if row is None:
            return f"removed {target}"
        return getattr(row, "url", None) or row.email

    return describe


def register() -> None:
    register_router(route_tenant_events)
    register_channel(WEBHOOK, send_webhook, _describe(WebhookEndpoint))
    register_channel(EMAIL, send_mail, _describe(EmailRecipient))
