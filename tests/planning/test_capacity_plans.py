"""Capacity plans: worked numbers for the sizing chain, the API, and the gap feeding a migration plan."""

import uuid
from datetime import date

import pytest

from planning.engines.capacity import ForecastMonth, plan_capacity, reference_models
from planning.models import CapacityPlan, MigrationPlan

URL = "/api/v1/ops/capacity-plans"


def _post(client, body, url=URL):
    return client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()))


def test_dense_70b_worked_numbers():
    model = reference_models()["llama-3.1-70b"]
    # KV cache per token: 2 (K, V) x 80 layers x 8 KV heads x 128 head dim x 2 bytes = 327,680 bytes.
    assert model.kv_bytes_per_token == 327_680
    month = ForecastMonth(date(2026, 12, 1), requests_per_s=400, prompt_tokens=1000, output_tokens=250)
    result = plan_capacity(model, (month,), ("H100-SXM5-80GB", "GB200-NVL72"))
    assert result.weight_gb == 141.2  # 70.6B x 2 bytes
    (plan,) = result.months
    assert plan.tokens_per_s == 100_000  # 400 requests/s x 250 output tokens
    h100, gb200 = plan.needs
    # Replica memory: 141.2 GB + 64 sequences x 1,250 tokens x 327,680 B = 167.41 GB.
    # H100: 80 GB x 0.9 usable = 72 GB per GPU -> 4 GPUs; GB200: 186 x 0.9 = 167.4 GB -> just short, 2 GPUs.
    assert (h100.gpus_per_replica, gb200.gpus_per_replica) == (4, 2)
    # Throughput: 21,600 tokens/s per 8 H100 on a 69B model x 69 / 70.6 x ratio x GPUs / 8.
    assert h100.tokens_per_s_per_replica == 10_555.241  # x 1.00 x 4/8
    assert gb200.tokens_per_s_per_replica == 12_613.513  # x 2.39 x 2/8
    assert (h100.replicas, h100.gpus, h100.racks, h100.kw) == (10, 40, 3, 61.2)  # 16 GPUs, 20.4 kW per rack
    assert (gb200.replicas, gb200.gpus, gb200.racks, gb200.kw) == (8, 16, 1, 132.0)


def test_moe_memory_follows_total_and_throughput_active_parameters():
    moe = reference_models()["mixtral-8x22b"]
    month = ForecastMonth(date(2026, 12, 1), tokens_per_s=100_000, prompt_tokens=1000, output_tokens=250)
    (h100,) = plan_capacity(moe, (month,), ("H100-SXM5-80GB",)).months[0].needs
    # 282 GB of weights (141B x 2) + 64 x 1,250 x 229,376 B = 300.4 GB -> 8 H100s (518 GB usable).
    assert h100.gpus_per_replica == 8
    # 21,600 x 69 / 39 active x 1.00 x 8/8 = 38,215.4 tokens/s: faster per GPU than the dense 70B.
    assert h100.tokens_per_s_per_replica == 38_215.385


def test_405b_does_not_fit_an_h100_node_and_a_tight_latency_asks_for_a_measurement():
    model = reference_models()["llama-3.1-405b"]
    month = ForecastMonth(
        date(2026, 12, 1), requests_per_s=10, prompt_tokens=1000, output_tokens=250, tpot_ms_target=50
    )
    (plan,) = plan_capacity(model, (month,), ("H100-SXM5-80GB", "GB200-NVL72")).months
    assert [n.gpu_model for n in plan.needs] == ["GB200-NVL72"]
    assert any("does not fit one NVLink domain" in n for n in plan.notes)
    assert any("tighter than the reference point's 200 ms" in n for n in plan.notes)
    measured = plan_capacity(model, (month,), ("H100-SXM5-80GB",), {"H100-SXM5-80GB": (16, 5000.0)}).months[0]
    assert measured.needs[0].replicas == 1 and measured.needs[0].throughput_source == "operator measurement"


FORECAST = [
    {"month": "2026-08-01", "tokens_per_s": 3_000_000, "prompt_tokens": 1000, "output_tokens": 250},
    {"month": "2026-10-01", "tokens_per_s": 7_000_000, "prompt_tokens": 1000, "output_tokens": 250},
]


@pytest.fixture
def demo_fleet(db):
    from devtools.services.fleet_seed import seed_fleet

    return seed_fleet(gpus=2048)


def test_capacity_gap_becomes_the_deliveries_of_a_migration_plan_that_retires_the_h100s(ops_api, demo_fleet):
    # 3.0M tokens/s / 12,613.5 per 2-GPU GB200 replica = 238 replicas = 476 GPUs = 7 racks -> one 8-rack unit;
    # 7.0M -> 555 replicas = 1,110 GPUs = 16 racks -> a second unit in October.
    r = _post(ops_api, {"name": "chat 70B", "model_name": "llama-3.1-70b", "forecast": FORECAST})
    assert r.status_code == 201, r.json()
    result = r.json()["result"]
    assert [g["needed_gpus"] for g in result["gap"]] == [476, 1110]
    assert result["deliveries"] == [
        {"date": "2026-08-01", "scalable_units": 1, "racks_per_unit": 8, "label": "capacity 2026-08"},
        {"date": "2026-10-01", "scalable_units": 1, "racks_per_unit": 8, "label": "capacity 2026-10"},
    ]
    migration = _post(ops_api, None, url=f"{URL}/{r.json()['id']}/migration-plan")
    assert migration.status_code == 201, migration.json()
    body = migration.json()
    assert [d["date"] for d in body["inputs"]["parameters"]["deliveries"]] == ["2026-08-01", "2026-10-01"]
    assert body["feasible"] is True and body["result"]["verdicts"]["old_fleet_retired"] is True
    plan = CapacityPlan.objects.get()
    assert str(plan.migration_plan_id) == body["id"]
    again = _post(ops_api, None, url=f"{URL}/{plan.id}/migration-plan")
    assert again.json()["id"] == body["id"] and MigrationPlan.objects.count() == 1
    assert ops_api.get(f"{URL}/{plan.id}").json()["migration_plan_id"] == body["id"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "x", "forecast": FORECAST}, "non_field_errors"),
        (
            {"name": "x", "model_name": "llama-3.1-70b", "forecast": [{"month": "2026-08-01", "requests_per_s": 5}]},
            "forecast",
        ),
        ({"name": "x", "model_name": "llama-3.1-70b", "forecast": []}, "forecast"),
        (
            {
                "name": "x",
                "model": {
                    "name": "m",
                    "total_params_b": 1,
                    "active_params_b": 2,
                    "layers": 1,
                    "kv_heads": 1,
                    "head_dim": 1,
                    "bytes_per_element": 2,
                    "context_tokens": 1,
                },
                "forecast": FORECAST,
            },
            "model",
        ),
    ],
)
def test_bad_capacity_input_is_a_400(ops_api, db, body, field):
    r = _post(ops_api, body)
    assert r.status_code == 400 and r.json()["code"] == "validation_error"
    assert not CapacityPlan.objects.exists()


def test_unknown_reference_or_gpu_model_is_a_400_not_a_500(ops_api, db):
    assert _post(ops_api, {"name": "x", "model_name": "gpt-9", "forecast": FORECAST}).status_code == 400
    r = _post(ops_api, {"name": "x", "model_name": "llama-3.1-70b", "forecast": FORECAST, "target_gpu_model": "Z9"})
    assert r.status_code == 400


def test_tenant_tokens_cannot_plan_capacity(db):
    from rest_framework.test import APIClient

    from core.services.tokens import create_api_token
    from tenants.models import Tenant

    tenant = Tenant.objects.create(slug="acme", name="Acme")
    _, token = create_api_token(kind="tenant", tenant=tenant, role="admin", actor="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert _post(client, {"name": "x", "model_name": "llama-3.1-70b", "forecast": FORECAST}).status_code == 403
    assert client.get(f"{URL}/{uuid.uuid4()}").status_code == 403
    assert not CapacityPlan.objects.exists()


def test_unknown_plan_is_404(ops_api, db):
    assert ops_api.get(f"{URL}/{uuid.uuid4()}").status_code == 404
    assert _post(ops_api, None, url=f"{URL}/{uuid.uuid4()}/migration-plan").status_code == 404


def test_console_sizes_charts_and_turns_the_gap_into_a_migration(
    operator_client, demo_fleet, django_assert_max_num_queries
):
    data = {
        "name": "console",
        "model_name": "llama-3.1-70b",
        "prompt_tokens": "1000",
        "output_tokens": "250",
        "target_gpu_model": "GB200-NVL72",
        "month_0": "2026-08-01",
        "tokens_0": "3000000",
        "month_1": "2026-10-01",
        "tokens_1": "7000000",
    }
    r = operator_client.post("/plans/capacity/", data)
    plan = CapacityPlan.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/plans/capacity/{plan.pk}/"
    with django_assert_max_num_queries(4):  # session, user, plan, list count-free
        html = operator_client.get(f"/plans/capacity/{plan.pk}/").content.decode()
    assert 'id="chart-need-data"' in html and 'id="chart-kw-data"' in html and 'id="to-migration"' in html
    r = operator_client.post(f"/plans/capacity/{plan.pk}/migration/")
    migration = MigrationPlan.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/plans/{migration.pk}/"
    bad = operator_client.post("/plans/capacity/", {"name": "", "model_name": "llama-3.1-70b"})
    assert bad.status_code == 400 and b"form-errors" in bad.content
    assert operator_client.get("/plans/capacity/").status_code == 200


def test_capacity_figures_are_data():
    from planning.charts import capacity_need_figure, capacity_power_figure

    result = {
        "target_gpu_model": "GB200-NVL72",
        "gap": [{"current_gpus": 0}, {"current_gpus": 0}],
        "months": [
            {"month": "2026-08-01", "needs": [{"gpu_model": "GB200-NVL72", "gpus": 476, "kw": 924.0}]},
            {"month": "2026-10-01", "needs": [{"gpu_model": "GB200-NVL72", "gpus": 1110, "kw": 2112.0}]},
        ],
    }
    need = {t.name: t for t in capacity_need_figure(result).data}
    assert list(need["GB200-NVL72: GPUs needed"].y) == [476, 1110]
    assert list(need["GB200-NVL72: GPUs today"].y) == [0, 0]
    kw = {t.name: t for t in capacity_power_figure(result).data}
    assert list(kw["GB200-NVL72: rack kW"].y) == [924.0, 2112.0]


def test_capacity_pages_need_an_operator(client, db):
    assert client.get("/plans/capacity/").status_code == 302


CUSTOM = {
    "name": "own 8B",
    "model_name": "custom",
    "custom_name": "my-8b",
    "custom_total_params_b": "8",
    "custom_active_params_b": "8",
    "custom_layers": "32",
    "custom_kv_heads": "8",
    "custom_head_dim": "128",
    "custom_bytes_per_element": "2",
    "custom_context_tokens": "8192",
    "prompt_tokens": "1000",
    "output_tokens": "250",
    "target_gpu_model": "GB200-NVL72",
    "month_0": "2026-08-01",
    "tokens_0": "100000",
}


def test_console_form_takes_a_custom_model_within_bounds(operator_client, demo_fleet):
    r = operator_client.post("/plans/capacity/", CUSTOM)
    plan = CapacityPlan.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/plans/capacity/{plan.pk}/"
    model = plan.result["model"]
    assert (model["name"], model["total_params_b"], model["layers"], model["context_tokens"]) == (
        "my-8b",
        8.0,
        32,
        8192,
    )
    # KV cache per token = 2 x layers x KV heads x head dim x bytes = 2 x 32 x 8 x 128 x 2.
    assert plan.result["kv_bytes_per_token"] == 131_072
    assert plan.result["weight_gb"] == 16.0  # 8B params x 2 bytes

    for change, field in (
        ({"custom_layers": "0"}, "model.layers"),
        ({"custom_bytes_per_element": "16"}, "model.bytes_per_element"),
        ({"custom_total_params_b": "1e9"}, "model.total_params_b"),
        ({"custom_active_params_b": "9"}, "model"),  # more active than total parameters
        ({"custom_head_dim": ""}, "model.head_dim"),  # a blank figure is missing, not zero
    ):
        bad = operator_client.post("/plans/capacity/", {**CUSTOM, **change})
        assert bad.status_code == 400, change
        assert field in [e["field"] for e in bad.context["errors"]], (change, bad.context["errors"])
        assert b"form-errors" in bad.content and bad.context["form"]["custom_name"] == "my-8b"
    assert CapacityPlan.objects.count() == 1
