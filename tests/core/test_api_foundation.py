"""The API's common rules that hold before any resource exists: public schema and docs,
problem+json 404s, the Server-Timing header, flash messages kept off the agent API, token kinds and
hashing, agent tokens verified without a database read."""

import hashlib

import pytest
from django.core.management import call_command
from django.http import HttpResponse
from django.test import RequestFactory

from core.api.agent_tokens import mint_agent_token, verify_agent_token
from core.middleware import MessageMiddleware
from core.models import ApiToken

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/api/v1/schema", "/api/v1/schema/", "/api/v1/docs", "/api/v1/docs/"])
def test_schema_and_docs_are_public_in_both_slash_forms(client, path):
    response = client.get(path)
    assert response.status_code == 200


@pytest.mark.parametrize("path", ["/api/v1/schema/", "/api/v1/no-such-thing"])
def test_every_answer_says_how_long_the_application_spent_on_it(client, path):
    """`Server-Timing: app;dur=<ms>` lets a client split a slow answer into the handler's time
    and the time it queued or travelled (the fleet simulator's verdict reads it)."""
    timing = client.get(path)["Server-Timing"]
    name, _, duration = timing.partition(";dur=")
    assert name == "app" and float(duration) >= 0


@pytest.mark.parametrize(
    ("path", "has_messages"),
    [("/api/agent/v1/heartbeat", False), ("/api/agent/v1/desired-state", False), ("/fleet/", True), ("/api/v1/", True)],
)
def test_flash_messages_exist_everywhere_but_the_agent_api(path, has_messages):
    """No agent request shows a message, so the agent API skips making their storage; pages
    (and any other API route) keep it."""
    request = RequestFactory().get(path)
    request.session = {}
    response = MessageMiddleware(lambda r: HttpResponse())(request)
    assert hasattr(request, "_messages") is has_messages
    assert response.status_code == 200


def test_docs_page_uses_local_assets_only(client):
    html = client.get("/api/v1/docs/").content.decode()
    assert "//unpkg" not in html and "cdn" not in html.lower()


@pytest.mark.parametrize("auth", [None, "Bearer nonsense"])
def test_unknown_api_path_is_problem_json_404(client, auth):
    headers = {"HTTP_AUTHORIZATION": auth} if auth else {}
    response = client.get("/api/v1/no-such-thing", **headers)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == "not_found" and body["status"] == 404 and {"type", "title", "detail"} <= body.keys()


def test_create_token_prints_plain_value_last_and_stores_only_its_hash(operator_user, capsys):
    call_command("create_token", "--operator", operator_user.username)
    plain = capsys.readouterr().out.strip().splitlines()[-1]
    token = ApiToken.objects.get()
    assert token.digest == hashlib.sha256(plain.encode()).hexdigest()
    assert plain not in str(ApiToken.objects.values().get())


def test_agent_token_verifies_without_any_query(django_assert_num_queries, small_fleet):
    from fleet.models import Node

    node = Node.objects.first()
    token = mint_agent_token(node.pk)
    with django_assert_num_queries(0):
        assert verify_agent_token(token).node_id == node.pk
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    assert verify_agent_token(tampered) is None
    assert verify_agent_token("hga1.not-a-uuid.sig") is None


def test_setup_periodic_tasks_is_idempotent():
    from django_celery_beat.models import PeriodicTask

    from core.periodic import PERIODIC_TASKS

    call_command("setup_periodic_tasks")
    call_command("setup_periodic_tasks")
    assert PeriodicTask.objects.exclude(name__startswith="celery.").count() == len(PERIODIC_TASKS)


@pytest.mark.parametrize("url", ["/api/v1/ops/nodes?rack=Q%00", "/api/v1/allocations?state=%00"])
def test_nul_in_a_query_string_is_a_400_problem(client, url):
    response = client.get(url)
    assert response.status_code == 400 and response.json()["code"] == "validation_error"
