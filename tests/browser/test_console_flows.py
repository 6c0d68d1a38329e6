"""The flows of issue 20 in headless Chromium: a tenant lands on the portal, an invoice's
formatted money adds up, a retire asks first, and an overview tile opens the list it counts."""

import re
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

pytestmark = [pytest.mark.browser]
LIVE = pytest.mark.django_db(transaction=True)
# Pages that read the ledger (the portal, invoices) cannot be served by the live server: its
# transactional flush would TRUNCATE the append-only ledger, which its triggers refuse, and a
# browser routed into the test client runs on another connection (outside the test's
# transaction). So those flows run through Django's test client inside the test transaction and
# Chromium renders and reads the page each one ends on.
LEDGER = pytest.mark.django_db(databases=["default", "ledger"])


def _render(page, response, screenshot=None, name=""):
    page.set_content(response.content.decode())
    if screenshot:
        screenshot(page, name)
    return page


def _money(text: str) -> Decimal:
    """ "1,234.50 USD" or "−2.50 USD" → Decimal (the page's own formatting, read back)."""
    number = text.strip().split()[0].replace(",", "").replace("−", "-")
    return Decimal(number)


def _tenant_member(django_user_model, username="fin", password="fin-pass-12345"):
    from tenants.models import Membership, Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
    user = django_user_model.objects.create_user(username, password=password)
    Membership.objects.create(tenant=tenant, user=user, role="admin")
    return tenant, user


@LEDGER
def test_tenant_sign_in_lands_on_the_portal(page, client, screenshot, django_user_model):
    _tenant_member(django_user_model)
    assert client.get("/")["Location"].startswith("/accounts/login/?next=/")
    client.get("/accounts/login/?next=/")
    signed_in = client.post(
        "/accounts/login/", {"username": "fin", "password": "fin-pass-12345", "next": "/"}, follow=True
    )
    assert signed_in.redirect_chain == [("/portal/", 302)]
    _render(page, signed_in, screenshot, "portal-landing")
    nav = page.locator("#portal-nav")
    for label in ("Overview", "Allocations", "Usage", "Invoices", "API tokens"):
        assert nav.get_by_role("link", name=label).count() == 1
    _render(page, client.get("/fleet/"))  # an operator page: a 403 that points back to the portal
    assert "for the provider's operators" in page.locator("#forbidden").inner_text()
    assert page.locator("#forbidden").get_by_role("link", name="your tenant portal").get_attribute("href") == "/portal/"


@LEDGER
def test_invoice_shows_formatted_money_that_adds_up(page, client, screenshot, django_user_model):
    from billing.services.credits import record_manual_adjustment
    from billing.services.runs import run_billing
    from devtools.services.fleet_seed import seed_fleet
    from fleet.models import Node
    from tests.billing.conftest import make_event, record_history, store_events

    seed_fleet(gpus=64)
    tenant, user = _tenant_member(django_user_model)
    tenant.legal_name, tenant.tax_rate_percent = "Acme Research GmbH", Decimal("19")
    tenant.save()
    node = Node.objects.order_by("hostname").first()
    events = [
        make_event(tenant_id=tenant.pk, start=datetime(2026, 9, 3, tzinfo=UTC), seconds=3600),
        make_event(tenant_id=tenant.pk, start=datetime(2026, 9, 4, tzinfo=UTC), seconds=7200),
    ]
    record_history(events, node)
    store_events(node.pk, events)
    operator = django_user_model.objects.create_user("op", password="op-pass-12345", is_staff=True, is_superuser=True)
    record_manual_adjustment(
        by=operator, tenant_id=tenant.pk, period=date(2026, 9, 1), amount="-2.50", reason="goodwill"
    )
    run_billing(period=date(2026, 9, 1), finalize=True, actor="test", now=datetime(2026, 10, 2, tzinfo=UTC))

    client.force_login(user)
    _render(page, client.get("/portal/invoices/"))
    invoice_url = page.locator("table.list a").first.get_attribute("href")
    _render(page, client.get(invoice_url))
    lines = page.locator("#invoice-lines tr.charge td.amount")
    charges = [_money(t) for t in lines.all_inner_texts()]
    credits = [_money(t) for t in page.locator("#invoice-lines tr.credit td.amount").all_inner_texts()]
    subtotal, tax, total = (
        _money(page.locator(sel).inner_text()) for sel in ("#invoice-subtotal", "#invoice-tax", "#invoice-total")
    )
    for text in lines.all_inner_texts() + [page.locator("#invoice-total").inner_text()]:
        assert re.fullmatch(r"−?\d{1,3}(,\d{3})*\.\d{2} USD", text.strip()), text
    assert sum(charges) == subtotal
    assert credits == [Decimal("-2.50")]
    assert tax == ((subtotal + sum(credits)) * Decimal("0.19")).quantize(Decimal("0.01"))
    assert subtotal + sum(credits) + tax == total
    assert "Acme Research GmbH" in page.locator("#bill-to").inner_text()
    assert "Due" in page.locator("#invoice-dates").inner_text()
    screenshot(page, "invoice")
    assert client.get(invoice_url.rstrip("/") + ".pdf")["Content-Type"] == "application/pdf"


@LIVE
def test_retire_asks_for_confirmation(page, live_server, login, screenshot, django_user_model):
    from devtools.services.fleet_seed import seed_fleet
    from fleet.models import Node
    from tests.fleet.lifecycle_helpers import place

    seed_fleet(gpus=64)
    node = place(Node.objects.order_by("hostname").first(), "sanitizing")
    django_user_model.objects.create_user("op", password="op-pass-12345", is_staff=True, is_superuser=True)
    login(page, "op", "op-pass-12345")
    page.goto(f"{live_server.url}/fleet/nodes/{node.pk}/")
    page.locator("#node-actions button[value=retire]").click()
    page.wait_for_load_state("networkidle")
    confirm = page.locator("#confirm-action")
    assert f"Retire {node.hostname}?" in page.locator("h1").inner_text()
    assert "never returns to service" in confirm.inner_text() and "no tenant is affected" in confirm.inner_text()
    node.refresh_from_db()
    assert node.lifecycle == "sanitizing"  # the first click changed nothing
    screenshot(page, "retire-confirm")
    confirm.get_by_role("link", name="Cancel, change nothing").click()
    assert page.url.endswith(f"/fleet/nodes/{node.pk}/")


@LIVE
def test_overview_tile_links_to_the_list_it_counts(page, live_server, login, screenshot, django_user_model):
    from devtools.services.fleet_seed import seed_fleet
    from fleet.models import Node

    seed_fleet(gpus=64)
    sick = list(Node.objects.order_by("hostname")[:3])
    Node.objects.filter(pk__in=[n.pk for n in sick]).update(health="unhealthy")
    django_user_model.objects.create_user("op", password="op-pass-12345", is_staff=True, is_superuser=True)
    login(page, "op", "op-pass-12345")
    page.goto(f"{live_server.url}/")
    tile = page.locator("#tile-unwell")
    count = int(tile.locator(".value").inner_text())
    assert count == 3
    screenshot(page, "overview-now")
    tile.click()
    page.wait_for_load_state("networkidle")
    assert "/fleet/nodes/" in page.url and "health=unhealthy" in page.url
    listed = page.locator("table.list tbody tr").all_inner_texts()
    assert len(listed) == count and all(any(n.hostname in row for row in listed) for n in sick)
