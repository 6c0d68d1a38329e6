"""Agent credentials, tried as an attacker: an old token after a re-key, the token of a retired
node, a token signed under a guessed key, the old unversioned form, a tampered issue time."""

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from rest_framework.test import APIClient

from core.api.agent_tokens import mint_agent_token, verify_agent_token

pytestmark = pytest.mark.django_db(databases=["default", "ledger"])
DESIRED = "/api/agent/v1/desired-state"
METER = "/api/agent/v1/meter-events"


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _works(token: str) -> dict:
    """Status of a control-plane agent route and of the ledger's meter ingest for this token."""
    client = _client(token)
    return {
        "desired": client.get(DESIRED).status_code,
        "meter": client.post(METER, {"events": [{"event_id": "x"}]}, format="json").status_code,
    }


def _create_token(hostname: str) -> str:
    out = io.StringIO()
    call_command("create_token", "--agent", hostname, stdout=out)
    return out.getvalue().strip().splitlines()[-1]


REFUSED = {"desired": 401, "meter": 401}
ACCEPTED = {"desired": 200, "meter": 400}  # the meter batch is malformed: authenticated, then refused


def test_tokens_carry_a_key_id_and_issue_time(small_fleet):
    from fleet.models import Node

    node = Node.objects.first()
    token = _create_token(node.hostname)
    identity = verify_agent_token(token)
    assert identity.node_id == node.pk and len(identity.key_id) == 8
    assert abs(identity.issued_at - datetime.now(UTC)) < timedelta(minutes=1)
    assert token.split(".")[2] == identity.key_id


def test_re_keying_revokes_the_previous_token(small_fleet):
    from core.models import AuditEvent
    from fleet.models import Node

    node = Node.objects.first()
    first = _create_token(node.hostname)
    assert _works(first) == ACCEPTED
    second = _create_token(node.hostname)
    assert first != second
    assert _works(first) == REFUSED
    assert "re-keyed" in _client(first).get(DESIRED).json()["detail"]
    assert _works(second) == ACCEPTED
    assert AuditEvent.objects.filter(action="token.rekey_agent", object_id=str(node.pk)).count() == 2


def test_a_retired_or_disposed_nodes_token_stops_working(small_fleet, django_capture_on_commit_callbacks):
    from fleet.choices import Lifecycle
    from fleet.models import Node
    from fleet.services.lifecycle import transition
    from tests.fleet.lifecycle_helpers import pass_drive_gate

    node = Node.objects.first()
    token = _create_token(node.hostname)
    pass_drive_gate(node)  # retiring needs the drives sanitised (fleet's exit gate)
    Node.objects.filter(pk=node.pk).update(lifecycle=Lifecycle.SANITIZING)
    node.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        transition(node, Lifecycle.RETIRED, actor="user:test", action="retire", reason="end of life")
    assert _works(token) == REFUSED
    assert "retired" in _client(token).post(METER, {"events": []}, format="json").json()["detail"]
    with pytest.raises(CommandError, match="retired"):
        _create_token(node.hostname)  # no fresh token for a gone node either


def test_forged_tokens_are_refused(small_fleet):
    from fleet.models import Node

    node = Node.objects.first()
    with override_settings(AGENT_TOKEN_KEY="hangar-embedded-default-not-for-production"):  # the old SECRET_KEY
        guessed = mint_agent_token(node.pk)
    assert _works(guessed) == REFUSED
    real = mint_agent_token(node.pk)
    prefix, node_id, key_id, issued, signature = real.split(".")
    backdated = ".".join([prefix, node_id, key_id, str(int(issued) + 1), signature])
    assert _works(backdated) == REFUSED
    assert _works(f"hga1.{node_id}.{signature}") == REFUSED
    assert _works("hga2." + "A" * 300) == REFUSED


def test_the_agent_token_key_is_not_the_secret_key():
    from django.conf import settings

    assert settings.AGENT_TOKEN_KEY and settings.AGENT_TOKEN_KEY != settings.SECRET_KEY
    assert settings.METERING_GRANT_KEY not in (settings.SECRET_KEY, settings.AGENT_TOKEN_KEY)


def test_each_side_checks_its_own_copy_of_the_revocation_list(small_fleet, django_assert_num_queries):
    """Heartbeats and desired-state never need the ledger; meter ingest never the control plane."""
    from django.core.cache import cache
    from django.db import connections

    from fleet.models import Node

    node = Node.objects.first()
    token = _create_token(node.hostname)
    cache.clear()  # the check itself, not a cached answer
    with django_assert_num_queries(0, connection=connections["ledger"]):
        assert _client(token).get(DESIRED).status_code == 200
    with django_assert_num_queries(0, connection=connections["default"]):
        assert _client(token).post(METER, {"events": [{"event_id": "x"}]}, format="json").status_code == 400
    old = token
    _create_token(node.hostname)
    assert _works(old) == REFUSED  # both copies moved
