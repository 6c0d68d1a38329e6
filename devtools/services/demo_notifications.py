"""The demo's notification wiring: on-call paging channels (a PagerDuty-format channel, a signed
webhook, e-mail) and Acme's webhook endpoint, all pointing at the local notification sink
(devtools.notification_sink, port 8002), so pages and tenant deliveries show in the console's
Notifications log without any external service. E-mail goes to the worker's console in DEBUG."""

from django.db import transaction

from health.choices import PagingKind, PagingTier
from health.models import PagingChannel
from tenants.models import Tenant, WebhookEndpoint
from tenants.notifications import EVENT_TYPES
from tenants.services.notification_endpoints import create_endpoint

SINK = "http://127.0.0.1:8002"
ACTOR = "system:demo"
CHANNELS = (
    (
        "demo PagerDuty (local sink)",
        PagingKind.PAGERDUTY,
        PagingTier.PRIMARY,
        f"{SINK}/pagerduty/v2/enqueue",
        "R0UTINGKEYDEMO",
        "",
    ),
    ("demo on-call webhook", PagingKind.WEBHOOK, PagingTier.PRIMARY, f"{SINK}/oncall", "demo-paging-secret", ""),
    ("demo on-call e-mail", PagingKind.EMAIL, PagingTier.PRIMARY, "", "", "oncall@example.com"),
    (
        "demo escalation (manager)",
        PagingKind.WEBHOOK,
        PagingTier.ESCALATION,
        f"{SINK}/escalation",
        "demo-escalation",
        "",
    ),
)


@transaction.atomic
def seed_demo_notifications(stdout) -> None:
    for name, kind, tier, url, secret, recipients in CHANNELS:
        _, created = PagingChannel.objects.get_or_create(
            name=name,
            defaults={"kind": kind, "tier": tier, "url": url, "secret": secret, "recipients": recipients},
        )
        if created:
            stdout.write(f"  paging channel: {name}")
    acme = Tenant.objects.filter(slug="acme").first()
    if acme is not None and not WebhookEndpoint.objects.filter(tenant=acme).exists():
        create_endpoint(tenant=acme, url=f"{SINK}/acme", event_types=list(EVENT_TYPES), actor=ACTOR)
        stdout.write("  acme webhook endpoint: every event to the local sink")
