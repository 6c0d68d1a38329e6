"""Tokens that end: API tokens expire (a default for new ones, chosen or none in the admin and
the command), and every failed agent-token check counts toward the address's budget, on the
meter route too and for a validly signed but revoked token."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from core.api.agent_tokens import mint_agent_token
from core.models import ApiToken
from core.services.agent_credentials import issue_agent_token
from core.services.tokens import create_api_token
from tests.fleet.admin_helpers import client_for, staff_with

pytestmark = pytest.mark.django_db(databases=["default", "ledger"])


def _client(plain, address="10.0.0.7"):
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


def test_new_tokens_expire_by_default_and_an_expired_token_is_refused(operator_user, settings):
    token, plain = create_api_token(kind="operator", user=operator_user, actor="test")
    lifetime = token.expires_at - timezone.now()
    assert (
        timedelta(days=settings.API_TOKEN_LIFETIME_DAYS - 1)
        < lifetime
        <= timedelta(days=settings.API_TOKEN_LIFETIME_DAYS)
    )
    assert _client(plain).get("/api/v1/ops/nodes").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    refused = _client(plain).get("/api/v1/ops/nodes")
    assert refused.status_code == 401 and "expired" in refused.json()["detail"]
    _, never = create_api_token(kind="operator", user=operator_user, actor="test", expires_at=None)
    assert _client(never).get("/api/v1/ops/nodes").status_code == 200


def test_the_admin_issues_with_the_default_expiry_shows_it_and_the_scope(django_user_model):
    root = staff_with(django_user_model, "root", is_superuser=True)
    admin = client_for(Client, root)
    form = admin.get(reverse("admin:core_apitoken_add"))
    initial = form.context["adminform"].form.fields["expires_at"].initial
    assert initial is not None and 'name="expires_at_0"' in form.content.decode()
    # what the browser sends back: the pre-filled default
    done = admin.post(
        reverse("admin:core_apitoken_add"),
        {
            "kind": "operator",
            "user": root.pk,
            "expires_at_0": initial.strftime("%Y-%m-%d"),
            "expires_at_1": initial.strftime("%H:%M:%S"),
        },
    )
    assert done.status_code == 200 and done.context["issued"]
    token = ApiToken.objects.get()
    assert token.expires_at is not None and token.scope_superuser
    listing = admin.get(reverse("admin:core_apitoken_changelist")).content.decode()
    assert "superuser" in listing and str(token.expires_at.year) in listing


def test_create_token_takes_an_expiry(operator_user):
    out = StringIO()
    call_command("create_token", "--operator", operator_user.username, "--expires-in-days", "0", stdout=out)
    assert ApiToken.objects.get().expires_at is None
    call_command("create_token", "--operator", operator_user.username, "--expires-in-days", "7", stdout=out)
    assert ApiToken.objects.order_by("-created_at").first().expires_at < timezone.now() + timedelta(days=8)


@pytest.fixture
def small_budget(settings):
    settings.API_THROTTLE_RATES = {**settings.API_THROTTLE_RATES, "failed_auth": "3/min"}
    cache.clear()
    yield
    cache.clear()


def test_forged_tokens_on_the_meter_route_count_toward_the_address_budget(small_budget, small_fleet):
    from fleet.models import Node

    node = Node.objects.order_by("hostname").first()
    forged = mint_agent_token(node.pk)[:-4] + "AAAA"
    statuses = [
        _client(forged).post("/api/agent/v1/meter-events", {"events": []}, format="json").status_code for _ in range(4)
    ]
    assert statuses == [401, 401, 401, 429]


def test_a_revoked_agent_token_counts_as_a_failed_check(small_budget, small_fleet):
    from fleet.models import Node

    node = Node.objects.order_by("hostname").first()
    old = mint_agent_token(node.pk, issued_at=timezone.now() - timedelta(minutes=1))
    issue_agent_token(node=node, actor="test")  # re-keyed: the old token is revoked
    statuses = [_client(old).get("/api/agent/v1/desired-state").status_code for _ in range(3)]
    assert statuses == [401, 401, 401]
    assert _client("hga2.garbage").get("/api/agent/v1/desired-state").status_code == 429
