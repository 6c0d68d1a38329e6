"""A tenant's webhook endpoints and e-mail recipients (writes; tenant admins only, checked by
the API and the portal), and the replay of one of its deliveries. Every write is atomic and
audited; a signing secret never reaches the audit trail."""

from __future__ import annotations

import secrets

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from core.errors import Invalid, NotFound
from core.models import OutboxDelivery
from core.netguard import AddressRefused
from core.outbox import replay_delivery
from core.services.audit import record_audit
from core.transports import check_webhook_url
from tenants.models import EmailRecipient, Tenant, WebhookEndpoint
from tenants.notifications import EVENT_TYPES, MAX_ENDPOINTS, MAX_RECIPIENTS, audience

URL_MAX = 500


def _event_types(value) -> list[str]:
    if not isinstance(value, list) or not value or len(value) > len(EVENT_TYPES):
        raise Invalid(
            "event_types is a non-empty list of event types from the catalogue.",
            extra={"errors": [{"field": "event_types", "message": f"choose from: {', '.join(EVENT_TYPES)}"}]},
        )
    unknown = sorted({str(v)[:60] for v in value} - set(EVENT_TYPES))
    if unknown:
        raise Invalid(
            f"Unknown event types: {', '.join(unknown)}.",
            extra={"errors": [{"field": "event_types", "message": f"choose from: {', '.join(EVENT_TYPES)}"}]},
        )
    return sorted(set(value))


def _url(url) -> str:
    url = (url or "").strip() if isinstance(url, str) else ""
    if not url or len(url) > URL_MAX:
        raise Invalid(
            f"url is an https:// URL of at most {URL_MAX} characters.",
            extra={"errors": [{"field": "url", "message": "https://… required"}]},
        )
    try:
        check_webhook_url(url)  # the SSRF guard: public addresses over HTTPS, or a range an operator allows
    except AddressRefused as exc:
        raise AddressRefused(exc.detail, extra={"errors": [{"field": "url", "message": exc.detail[:200]}]}) from None
    return url


@transaction.atomic
def create_endpoint(*, tenant: Tenant, url, event_types, description: str = "", actor: str) -> WebhookEndpoint:
    if WebhookEndpoint.objects.filter(tenant=tenant).count() >= MAX_ENDPOINTS:
        raise Invalid(f"A tenant has at most {MAX_ENDPOINTS} webhook endpoints; remove one first.")
    endpoint = WebhookEndpoint.objects.create(
        tenant=tenant,
        url=_url(url),
        event_types=_event_types(event_types),
        description=(description or "")[:200],
        secret=f"whsec_{secrets.token_urlsafe(32)}",
    )
    record_audit(
        actor=actor,
        action="webhook_endpoint.create",
        target=endpoint,
        after={"url": endpoint.url, "event_types": endpoint.event_types},
    )
    return endpoint


@transaction.atomic
def update_endpoint(
    *, endpoint: WebhookEndpoint, actor: str, url=None, event_types=None, enabled=None, description=None
) -> WebhookEndpoint:
    before = {"url": endpoint.url, "event_types": endpoint.event_types, "enabled": endpoint.enabled}
    if url is not None:
        endpoint.url = _url(url)
    if event_types is not None:
        endpoint.event_types = _event_types(event_types)
    if enabled is not None:
        endpoint.enabled = bool(enabled)
    if description is not None:
        endpoint.description = str(description)[:200]
    endpoint.save()
    record_audit(
        actor=actor,
        action="webhook_endpoint.update",
        target=endpoint,
        before=before,
        after={"url": endpoint.url, "event_types": endpoint.event_types, "enabled": endpoint.enabled},
    )
    return endpoint


@transaction.atomic
def delete_endpoint(*, endpoint: WebhookEndpoint, actor: str) -> None:
    record_audit(actor=actor, action="webhook_endpoint.delete", target=endpoint, before={"url": endpoint.url})
    endpoint.delete()


@transaction.atomic
def add_recipient(*, tenant: Tenant, email, event_types, actor: str) -> EmailRecipient:
    email = (email or "").strip().lower() if isinstance(email, str) else ""
    try:
        validate_email(email)
    except ValidationError:
        raise Invalid(
            "email is an e-mail address.", extra={"errors": [{"field": "email", "message": "not an address"}]}
        ) from None
    if EmailRecipient.objects.filter(tenant=tenant).count() >= MAX_RECIPIENTS:
        raise Invalid(f"A tenant has at most {MAX_RECIPIENTS} e-mail recipients; remove one first.")
    if EmailRecipient.objects.filter(tenant=tenant, email=email).exists():
        raise Invalid(
            f"{email} is a recipient already.", extra={"errors": [{"field": "email", "message": "already added"}]}
        )
    recipient = EmailRecipient.objects.create(tenant=tenant, email=email, event_types=_event_types(event_types))
    record_audit(
        actor=actor, action="email_recipient.create", target=recipient, after={"event_types": recipient.event_types}
    )
    return recipient


@transaction.atomic
def remove_recipient(*, recipient: EmailRecipient, actor: str) -> None:
    record_audit(actor=actor, action="email_recipient.delete", target=recipient, before={"email": recipient.email})
    recipient.delete()


def tenant_deliveries(tenant: Tenant):
    """The tenant's own deliveries only (another tenant's are not found)."""
    return OutboxDelivery.objects.filter(audience=audience(tenant.pk))


def replay_tenant_delivery(*, tenant: Tenant, delivery_id, actor: str) -> OutboxDelivery:
    delivery = tenant_deliveries(tenant).filter(pk=delivery_id).first()
    if delivery is None:
        raise NotFound("No delivery with that id; GET /api/v1/notification-deliveries lists yours.")
    return replay_delivery(delivery, actor=actor)
