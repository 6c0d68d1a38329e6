"""Rate limits per token kind: the attacker's burst and the 429 that stops it."""

import time

import pytest
from django.core.cache import cache
from rest_framework.response import Response
from rest_framework.test import APIClient, APIRequestFactory
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from core.api.agent_tokens import mint_agent_token
from core.api.authentication import AgentTokenAuthentication
from core.api.permissions import IsAgent
from core.api.throttles import spend
from core.services.agent_credentials import revocation_cache_key, revoke_node_agent_tokens
from core.services.tokens import create_api_token
from fleet.models import Node
from tenants.models import Tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_budgets(settings):
    settings.API_THROTTLE_RATES = {
        "tenant": "5/min",
        "operator": "4/min",
        "agent": "3/min",
        "anonymous": "2/min",
        "failed_auth": "3/min",
    }
    cache.clear()
    yield settings.API_THROTTLE_RATES
    cache.clear()


def _client(plain=None, address="10.0.0.1"):
    client = APIClient(REMOTE_ADDR=address)
    if plain:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


def _assert_throttled(response):
    assert response.status_code == 429
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "throttled"
    assert int(response.headers["Retry-After"]) >= 1


def test_a_tenant_burst_is_429_and_every_token_of_the_tenant_shares_the_budget(small_budgets):
    tenant = Tenant.objects.create(slug="burst", name="Burst")
    first = _client(create_api_token(kind="tenant", tenant=tenant, role="admin", actor="t")[1])
    second = _client(create_api_token(kind="tenant", tenant=tenant, role="viewer", actor="t")[1])
    assert [first.get("/api/v1/tenant").status_code for _ in range(3)] == [200] * 3
    assert [second.get("/api/v1/tenant").status_code for _ in range(2)] == [200] * 2
    _assert_throttled(second.get("/api/v1/tenant"))  # a new token does not buy a new budget
    other = Tenant.objects.create(slug="other", name="Other")
    assert (
        _client(create_api_token(kind="tenant", tenant=other, role="admin", actor="t")[1])
        .get("/api/v1/tenant")
        .status_code
        == 200
    )  # another tenant is unaffected


def test_an_operator_burst_is_429(small_budgets, operator_token):
    client = _client(operator_token)
    assert [client.get("/api/v1/ops/nodes").status_code for _ in range(4)] == [200] * 4
    _assert_throttled(client.get("/api/v1/ops/nodes"))


def test_an_agent_burst_is_429_per_node(small_budgets, small_fleet):
    """Spent once per request although the authenticator spends it (in the round trip that
    reads the revocation entry) and the throttle only takes the verdict."""
    first, second = Node.objects.order_by("hostname")[:2]
    client = _client(mint_agent_token(first.pk))
    assert [client.get("/api/agent/v1/desired-state").status_code for _ in range(3)] == [200] * 3
    _assert_throttled(client.get("/api/agent/v1/desired-state"))
    assert _client(mint_agent_token(second.pk)).get("/api/agent/v1/desired-state").status_code == 200


def test_guessing_tokens_is_throttled_per_address(small_budgets, operator_token):
    guesses = [_client(f"hgo_guess{i}").get("/api/v1/ops/nodes").status_code for i in range(3)]
    assert guesses == [401, 401, 401]
    _assert_throttled(_client("hgo_guess4").get("/api/v1/ops/nodes"))
    # the throttled address is refused before its token is looked at; another address is not
    _assert_throttled(_client(operator_token).get("/api/v1/ops/nodes"))
    assert _client(operator_token, address="10.0.0.2").get("/api/v1/ops/nodes").status_code == 200


def test_guessing_agent_tokens_is_throttled(small_budgets, small_fleet):
    bad = "hga1.00000000-0000-0000-0000-000000000000.AAAA"
    statuses = [_client(bad).get("/api/agent/v1/desired-state").status_code for _ in range(4)]
    assert statuses[:3] == [401] * 3 and statuses[3] == 429


def test_the_production_budgets_fit_a_node_agent():
    """An agent's steady traffic (heartbeat + desired-state every 10 s, meters every 60 s, health
    every 300 s) is ~13/min; its default budget leaves room for flushing a backlog."""
    from config import settings as production  # the module's values, before the suite raised them

    steady = 6 + 6 + 1 + 0.2
    count, unit = production.API_THROTTLE_RATES["agent"].split("/")
    assert unit == "min" and int(count) >= 20 * steady


def test_guessed_agent_tokens_are_throttled_but_the_address_valid_agents_keep_reporting(small_budgets, small_fleet):
    """Agents behind one NAT address: a broken (or hostile) one burning the failed-auth budget
    does not lock the others out; its own guesses stay throttled."""
    from fleet.models import Node

    node = Node.objects.order_by("hostname").first()
    forged = mint_agent_token(node.pk)[:-4] + "AAAA"
    assert [_client(forged).get("/api/agent/v1/desired-state").status_code for _ in range(3)] == [401] * 3
    _assert_throttled(_client(forged).get("/api/agent/v1/desired-state"))
    _assert_throttled(_client("not-a-token").get("/api/agent/v1/desired-state"))
    assert _client(mint_agent_token(node.pk)).get("/api/agent/v1/desired-state").status_code == 200


# The sliding-window counter itself (core.api.throttles.spend), on a clock the test sets.


def _spend_all(key, moments, limit=10, window=60):
    return [(t, spend(key, limit, window, now=t)) for t in moments]


def test_a_steady_caller_within_its_budget_is_never_refused(small_budgets):
    """9 a minute against 10 (the counter weighs the previous minute as if spread evenly, so
    a caller exactly at its budget can meet a refusal at a slot's start)."""
    start = 1_800_000_001.0  # a second into a slot (1.8e9 is a multiple of 60)
    results = _spend_all("steady", [start + 60 / 9 * i for i in range(100)])
    assert all(wait is None for _, wait in results)


def test_a_burst_gets_the_budget_then_waits_as_long_as_it_is_told(small_budgets):
    start = 1_800_000_030.0  # halfway into a slot
    burst = _spend_all("burst", [start] * 25)
    assert [wait is None for _, wait in burst] == [True] * 10 + [False] * 15
    wait = burst[-1][1]
    assert 0 < wait <= 120
    # refused requests were not counted: the wait it was told is enough, and not much more
    assert spend("burst", 10, 60, now=start + wait - 2) is not None
    assert spend("burst", 10, 60, now=start + wait + 0.01) is None


def test_a_hammering_caller_is_held_to_its_rate(small_budgets):
    """One request every 0.5 s for ten minutes against 10 per minute: over the run it gets
    about its rate, and never more than twice the budget in any trailing minute."""
    start = 1_800_000_017.0
    moments = [start + 0.5 * i for i in range(1200)]
    allowed = [t for t, wait in _spend_all("hammer", moments) if wait is None]
    assert 85 <= len(allowed) <= 110
    assert max(sum(1 for a in allowed if t - 60 < a <= t) for t in allowed) <= 20


def test_the_counter_keeps_two_integers_per_caller_whatever_the_rate(small_budgets):
    start = 1_800_000_000.0
    _spend_all("small", [start + 0.1 * i for i in range(200)])
    slot = int(start // 60)
    assert cache.get(f"small:{slot}") == 10 and cache.get(f"small:{slot - 1}") is None


class _UnthrottledAgentView(APIView):
    """An agent route that opts out of the rate budget (none does today)."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]
    throttle_classes = []

    def get(self, request):
        return Response({"node": str(request.user.node_id)})


def _budget_spent(node_id) -> bool:
    return any(cache.get(f"throttle:agent:{node_id}:{slot}") for slot in _current_slots())


def _current_slots():
    _, window = SimpleRateThrottle.parse_rate(None, "3/min")
    slot = int(time.time() // window)
    return (slot - 1, slot)


def test_a_revoked_token_is_refused_with_the_entry_read_in_the_budget_trip(small_fleet):
    node = Node.objects.order_by("hostname")[3]
    plain = mint_agent_token(node.pk)
    assert _client(plain).get("/api/agent/v1/desired-state").status_code == 200  # entry now cached
    revoke_node_agent_tokens(node=node, actor="test", reason="stolen")
    response = _client(plain).get("/api/agent/v1/desired-state")
    assert response.status_code == 401 and "Revoked agent token" in response.json()["detail"]
    cache.delete(revocation_cache_key(node.pk, "default"))  # a miss: read from the database
    assert _client(plain).get("/api/agent/v1/desired-state").status_code == 401


def test_an_agent_route_without_the_throttle_still_checks_revocation_and_spends_nothing(small_budgets, small_fleet):
    node = Node.objects.order_by("hostname")[4]
    plain = mint_agent_token(node.pk)
    view = _UnthrottledAgentView.as_view()
    request = lambda: APIRequestFactory().get("/x", HTTP_AUTHORIZATION=f"Bearer {plain}")  # noqa: E731
    assert [view(request()).status_code for _ in range(5)] == [200] * 5  # over a 3/min budget: none applies
    assert not _budget_spent(node.pk)
    revoke_node_agent_tokens(node=node, actor="test", reason="stolen")
    assert view(request()).status_code == 401
