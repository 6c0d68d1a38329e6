"""The console's Twin page: the last report drawn with its charts, an empty state that says so,
and operators only."""

import json

import pytest

from devtools.twin import TwinSpec, compare, run_variant
from devtools.views import latest_report_path

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_report(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    return tmp_path


def test_without_a_run_the_page_and_every_chart_say_so(operator_client, no_report):
    response = operator_client.get("/twin/")
    assert response.status_code == 200
    assert b"No twin run yet" in response.content
    for name in ("goodput", "causes", "spares", "credits"):
        fig = json.loads(response.context["figures"][name])
        assert fig["layout"]["annotations"][0]["text"].startswith("No twin run yet")


def test_a_report_is_drawn_per_variant(operator_client, no_report):
    spec = TwinSpec.from_reference(nodes=64, days=90)
    report = compare([run_variant(spec), run_variant(spec.with_changes("spare_fraction=0.02"), name="2% spares")])
    latest_report_path().parent.mkdir(parents=True)
    latest_report_path().write_text(
        json.dumps({**report, "wall_seconds": 1.5, "finished_at": "2026-12-05T10:00:00+00:00"})
    )
    response = operator_client.get("/twin/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "2% spares" in body and "baseline" in body and "Modelled from the simulated run" in body
    goodput = json.loads(response.context["figures"]["goodput"])
    assert [t["name"] for t in goodput["data"]] == ["baseline", "2% spares"]
    assert len(goodput["data"][0]["y"]) == 3  # 90 days: three months
    causes = json.loads(response.context["figures"]["causes"])
    assert sum(sum(t["y"]) for t in causes["data"]) == sum(v["interruptions"] for v in report["variants"])


def test_a_broken_report_file_is_the_empty_state_not_a_500(operator_client, no_report):
    latest_report_path().parent.mkdir(parents=True)
    latest_report_path().write_text("{not json")
    assert b"No twin run yet" in operator_client.get("/twin/").content


def test_only_operators_see_the_twin(client, django_user_model, no_report):
    assert client.get("/twin/").status_code == 302  # to sign-in
    tenant_user = django_user_model.objects.create_user("t", password="pw-123456789")
    client.force_login(tenant_user)
    assert client.get("/twin/").status_code == 403
