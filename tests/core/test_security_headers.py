"""What the console sends with every page: a Content-Security-Policy whose only inline scripts
are the page's own (a per-request nonce; no inline handlers anywhere), no caching of anything
a signed-in user or a token sees, a session that ends when nobody uses it, and names that can
hold no control, bidi or zero-width characters."""

import re
import time
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from core.middleware import IDLE_KEY
from tenants.models import Allocation

pytestmark = pytest.mark.django_db
TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def test_pages_carry_a_csp_whose_nonce_their_inline_scripts_use(operator_client, small_fleet):
    response = operator_client.get("/")
    assert response.status_code == 200
    policy = response["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "object-src 'none'" in policy and "frame-ancestors 'none'" in policy
    nonce = re.search(r"'nonce-([^']+)'", policy)[1]
    inline = re.findall(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)([^>]*)>", response.content.decode())
    assert inline and all(f'nonce="{nonce}"' in attrs for attrs in inline)
    assert operator_client.get("/")["Content-Security-Policy"] != policy  # a fresh nonce per request


def test_no_template_has_an_inline_handler_or_a_script_without_the_nonce():
    for path in TEMPLATES.rglob("*.html"):
        text = path.read_text()
        assert not re.search(r"\son[a-z]+\s*=\s*[\"']", text), f"inline handler in {path}"
        for attrs in re.findall(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)([^>]*)>", text):
            assert "request.csp_nonce" in attrs, f"inline script without the nonce in {path}"


def test_signed_in_pages_and_token_answers_are_never_stored(operator_client, small_fleet, ops_api):
    assert operator_client.get("/")["Cache-Control"] == "no-store"
    assert ops_api.get("/api/v1/ops/nodes")["Cache-Control"] == "no-store"
    public = Client().get("/api/v1/schema")
    assert public.status_code == 200 and "no-store" not in public.get("Cache-Control", "")


def test_a_session_idle_too_long_is_signed_out(operator_client, small_fleet, settings):
    assert operator_client.get("/").status_code == 200
    session = operator_client.session
    session[IDLE_KEY] = int(time.time()) - settings.SESSION_IDLE_SECONDS - 5
    session.save()
    response = operator_client.get("/")
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_background_refreshes_do_not_keep_a_session_alive(operator_client, small_fleet, settings):
    operator_client.get("/")
    session = operator_client.session
    stale = int(time.time()) - settings.SESSION_IDLE_SECONDS + 30
    session[IDLE_KEY] = stale
    session.save()
    operator_client.get("/api/v1/ops/nodes", HTTP_ACCEPT="application/json")  # a dashboard's fetch
    assert operator_client.session[IDLE_KEY] == stale
    operator_client.get("/")  # a visit
    assert operator_client.session[IDLE_KEY] > stale


def test_sessions_last_twelve_hours_at_most(settings):
    assert settings.SESSION_COOKIE_AGE == 12 * 3600 and settings.SESSION_COOKIE_HTTPONLY


BAD_NAMES = {
    "right-to-left override": "acme\u202eeciovni",
    "zero-width space": "ac\u200bme",
    "zero-width joiner": "ac\u200dme",
    "left-to-right isolate": "\u2066acme\u2069",
    "byte order mark": "\ufeffacme",
    "newline": "acme\nInvoice paid",
    "NUL": "acme\x00",
    "escape": "acme\x1b[31m",
}


@pytest.mark.parametrize("what", BAD_NAMES)
def test_names_refuse_control_bidi_and_zero_width_characters(small_fleet, what):
    from core.services.tokens import create_api_token
    from tenants.services.tenants import create_tenant

    tenant, _ = create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test")
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {create_api_token(kind='tenant', tenant=tenant, role='admin', actor='t')[1]}"
    )
    body = {"name": BAD_NAMES[what], "instance_type": "h100-sxm-8x", "node_count": 1, "fabric": "isolated"}
    response = client.post("/api/v1/allocations", body, format="json", HTTP_IDEMPOTENCY_KEY=what)
    assert response.status_code == 400, response.content
    assert response.json()["errors"][0]["field"] in ("name", "body")  # a NUL is refused by the parser itself
    assert not Allocation.objects.exists()
    from core.errors import Invalid

    with pytest.raises(Invalid):
        create_tenant(slug="evil", name=BAD_NAMES[what], max_nodes=1, actor="test")


def test_names_in_any_script_are_welcome(small_fleet):
    from tenants.services.tenants import create_tenant

    for name in ("Åcme Ørsted", "株式会社アクメ", "Acme — AI (東京)", "שלום acme"):
        create_tenant(slug=f"t{abs(hash(name)) % 10**6}", name=name, max_nodes=1, actor="test")


def test_the_admin_refuses_such_names_too(operator_client, small_fleet):
    from fleet.models import Site

    site = Site.objects.first()
    url = reverse("admin:fleet_site_change", args=[site.pk])
    page = operator_client.get(url)
    from tests.fleet.admin_helpers import change_form_data

    response = operator_client.post(url, change_form_data(page, name="DC1\u202e"))
    assert response.status_code == 200 and "invisible formatting character" in response.content.decode()
