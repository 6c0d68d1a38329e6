"""`make demo` shows pages and tenant deliveries with no external service: its paging channels
and Acme's endpoint point at the local notification sink, which the demo starts."""

import io
import json
import socket
import subprocess
import sys
import time

import pytest

from core.netguard import origin_of
from core.outbox import deliver_due
from devtools.demo import DEMO_PROCESSES, DEMO_SEED_STEPS
from devtools.services.demo_notifications import SINK, seed_demo_notifications
from fleet.models import Node
from health.models import PagingChannel
from health.services.incidents import open_operator_incident
from tenants.models import WebhookEndpoint
from tenants.services.tenants import create_tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def sink(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "sink.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "devtools.notification_sink", "--port", str(port), "--log", str(log)]
    )
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}", log
    process.terminate()
    process.wait(timeout=10)


def test_the_demo_pages_and_delivers_to_its_local_sink(small_fleet, sink, settings, operator_client):
    assert "devtools.services.demo_notifications.seed_demo_notifications" in DEMO_SEED_STEPS
    assert any("devtools.notification_sink" in argv for _, argv in DEMO_PROCESSES)
    url, log = sink
    settings.NOTIFY_LAB_ORIGINS = {origin_of(SINK), origin_of(url)}
    settings.NOTIFY_EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    create_tenant(slug="acme", name="Acme Research", max_nodes=8, actor="test")  # as the demo seeds it
    seed_demo_notifications(io.StringIO())
    seed_demo_notifications(io.StringIO())  # idempotent
    assert PagingChannel.objects.count() == 4 and WebhookEndpoint.objects.count() == 1
    for channel in PagingChannel.objects.exclude(url=""):  # the sink of this test, not the demo's port
        channel.url = channel.url.replace(SINK, url)
        channel.save()
    WebhookEndpoint.objects.update(url=f"{url}/acme")

    node = Node.objects.order_by("hostname").first()
    open_operator_incident(nodes=[node], title="demo: Xid 79", severity="fatal", actor="user:operator")
    assert deliver_due() == {"delivered": 3, "retrying": 0, "dead": 0}  # PagerDuty, webhook, e-mail
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(line["path"] for line in lines) == ["/oncall", "/pagerduty/v2/enqueue"]
    assert {line["dedup_key"] for line in lines} == {lines[0]["dedup_key"]}
    html = operator_client.get("/notifications/").content.decode()
    assert "incident.trigger" in html and "demo PagerDuty (local sink)" in html and "HTTP 202" in html
