"""Capacity plans from first principles: worked numbers recomputed by hand, an independent brute force,
metamorphic properties, the API (strict bodies, measured points) and the unit a migration keeps."""

import math
import uuid
from datetime import date

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from core.reference_data import generation, parameter
from planning.engines.capacity import (
    ForecastMonth,
    Measured,
    ModelSpec,
    measured_plausible,
    plan_capacity,
    reference_models,
)
from planning.models import CapacityPlan, MigrationPlan

URL = "/api/v1/ops/capacity-plans"
DEC = date(2026, 12, 1)
H100, H200, GB200 = "H100-SXM5-80GB", "H200-SXM5-141GB", "GB200-NVL72"


def _post(client, body, url=URL):
    return client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()))


def _need(result, gpu_model, month=0):
    return next(n for n in result.months[month].needs if n.gpu_model == gpu_model)


# ---------------------------------------------------------------- worked examples (docs/planning.md)


def test_dense_70b_at_400_requests_per_second_plans_at_least_the_prefill_minimum_and_states_concurrency():
    model = reference_models()["llama-3.1-70b"]
    month = ForecastMonth(DEC, requests_per_s=400, prompt_tokens=1000, output_tokens=250)
    result = plan_capacity(model, (month,), (H100, GB200))
    # KV cache per token: 2 (K, V) x 80 layers x 8 KV heads x 128 head dim x 2 bytes (BF16) = 327,680 B.
    assert result.kv_bytes_per_token == 327_680
    assert result.weight_gb == 141.2  # 70.6B x 2 bytes
    (plan,) = result.months
    assert (plan.tokens_per_s, plan.requests_per_s) == (100_000, 400)  # 400 x 250 output tokens
    h100 = _need(result, H100)
    # Prefill per request: 2 x 70.6e9 x 1,000 = 141.2 TFLOP, plus causal attention
    # 80 layers x 64 heads x (128 + 128) x 1,000 x 1,001 = 1.312 TFLOP: 142.51 TFLOP.
    # 400 requests/s x 142.51 TFLOP = 57.0 PFLOP/s: at 100 % of 989 TFLOPS that is 57.6 -> 58 H100s at least
    # (the 57 counts the matrix multiplications alone: 56.48 / 0.989 = 57.1).
    assert h100.prefill_min_gpus == 58
    assert h100.gpus >= h100.prefill_min_gpus
    # A replica of 4 H100s (4 x 80 GB x 0.9 = 288 GB usable; 2 GPUs hold the 141.2 GB of weights but leave
    # too little for sequences), continuous batching, one prefill and 249 decode steps per request:
    #   prefill 142.51 TFLOP / (4 x 989 TFLOPS x 0.5 compute efficiency) = 72.05 ms;
    #   decode step at an average batch of 336.88: (141.2 GB weights + 336.88 x 1,125 average context
    #   x 327,680 B = 124.19 GB KV) / (4 x 3.35 TB/s x 0.7 memory efficiency) = 28.29 ms
    #   (compute: 336.88 x 144.2 GFLOP / 1,978 TFLOPS = 24.6 ms, so memory binds the step);
    #   TPOT = 28.29 + 336.88 x 72.05 / 249 = 125.77 ms (under the 200 ms target);
    #   336.88 / (249 x 0.12577 s) = 10.757 requests/s = 2,689.3 output tokens/s;
    #   Little's law: 336.88 decoding + 10.757 x 2 s TTFT = 358.4 sequences held; x 1,250 tokens x 327,680 B
    #   = 146.8 GB of KV + 141.2 GB of weights = 288 GB: HBM is what stops the batch growing.
    assert (h100.gpus_per_replica, h100.batch_per_replica) == (4, 336.88)
    assert h100.prefill_ms == pytest.approx(72.049, abs=0.01)
    assert h100.decode_step_ms == pytest.approx(28.293, abs=0.01)
    assert h100.tpot_ms == pytest.approx(125.771, abs=0.01)
    assert h100.tokens_per_s_per_replica == pytest.approx(2689.3, abs=0.1)
    assert h100.concurrency_per_replica == 358.4
    assert h100.binding["batch"] == "memory" and h100.binding["step"] == "memory"
    assert h100.binding["fleet"] == "prefill"  # 10.757 x 72.05 ms: prefill takes 77.5 % of each replica's time
    # 100,000 / 2,689.3 = 37.2 -> 38 replicas x 4 = 152 H100s, 2 replicas a node = 19 nodes, 10 racks, 193.8 kW.
    assert (h100.replicas, h100.gpus, h100.nodes, h100.racks, h100.kw) == (38, 152, 19, 10, 193.8)
    assert any("Little's law" in s and "358 sequences" in s for s in h100.steps)
    # GB200: 2 GPUs (2 x 186 x 0.9 = 334.8 GB) serve 3,460.0 tokens/s: 29 replicas = 58 GPUs in one rack.
    gb200 = _need(result, GB200)
    assert (gb200.gpus_per_replica, gb200.replicas, gb200.gpus, gb200.racks, gb200.kw) == (2, 29, 58, 1, 132.0)
    assert gb200.gpus >= gb200.prefill_min_gpus == 23  # 57.0 PFLOP/s / 2,500 TFLOPS = 22.8


def test_fp8_halves_bytes_and_doubles_tensor_throughput():
    model = reference_models()["llama-3.1-70b"]
    month = ForecastMonth(DEC, requests_per_s=400, prompt_tokens=1000, output_tokens=250)
    bf16 = _need(plan_capacity(model, (month,), (H100,)), H100)
    result = plan_capacity(model, (month,), (H100,), precision="FP8")
    fp8 = _need(result, H100)
    assert result.weight_gb == 70.6 and result.kv_bytes_per_token == 163_840
    # 57.0 PFLOP/s / 1,979 TFLOPS dense FP8 = 28.8 -> 29 (the "29 at FP8").
    assert fp8.prefill_min_gpus == 29
    assert fp8.gpus_per_replica == 2 and fp8.gpus < bf16.gpus
    # Hopper has no FP4 tensor cores: not planned, and said so.
    fp4 = plan_capacity(model, (month,), (H100, GB200), precision="FP4").months[0]
    assert [n.gpu_model for n in fp4.needs] == [GB200]
    assert any("H100-SXM5-80GB: no FP4 tensor cores" in n for n in fp4.notes)


def test_mla_kv_cache_is_latent_plus_rope_per_layer():
    v3 = reference_models()["deepseek-v3"]
    # 61 layers x (512 latent + 64 RoPE key) x 1 byte = 35,136 B at FP8; 70,272 at BF16. GQA's formula would
    # give 2 x 61 x 128 heads x 128 x 1 = 1,998,848 B: 57x too much.
    assert v3.kv_bytes_per_token("FP8") == 35_136
    assert v3.kv_bytes_per_token("BF16") == 70_272


def test_moe_decode_reads_the_experts_the_batch_touches():
    v3 = reference_models()["deepseek-v3"]
    # 256 x (1 - (1 - 8/256)^64) = 256 x (1 - 0.13108) = 222.44 experts per layer at a batch of 64.
    assert v3.experts_touched(64) == pytest.approx(222.44, abs=0.01)
    assert v3.experts_touched(1) == pytest.approx(8.0)
    # Dense part 671 - 256 x 2.554 = 17.18 B; + 222.44 x 2.554 B = 585.3 GB read per step at FP8.
    assert v3.decode_weight_bytes("FP8", 64) / 1e9 == pytest.approx(585.3, abs=0.1)
    assert v3.decode_weight_bytes("FP8", 1) / 1e9 == pytest.approx(37.6, abs=0.1)  # ~ the 37B active
    assert v3.decode_weight_bytes("FP8", 10_000) / 1e9 == pytest.approx(671.0, abs=0.01)


def test_deepseek_v3_at_fp8_fits_one_8_gpu_h200_replica_at_16k_context():
    v3 = reference_models()["deepseek-v3"]
    month = ForecastMonth(DEC, requests_per_s=10, prompt_tokens=15_360, output_tokens=1_024)  # 16,384 tokens
    result = plan_capacity(v3, (month,), (H200, H100))
    h200 = _need(result, H200)
    # 8 x 141 GB x 0.9 = 1,015.2 GB usable: 671 GB of FP8 weights + 597.9 sequences x 16,384 tokens x 35,136 B
    # (344.2 GB) fit one node; every expert is touched at a batch of 590.8.
    assert h200.gpus_per_replica == 8 and h200.nodes == h200.replicas
    assert h200.weights_gb == 671.0 and h200.weights_gb + h200.kv_gb <= h200.usable_gb
    assert h200.concurrency_per_replica > 500 and h200.experts_touched == pytest.approx(256.0, abs=0.1)
    # 671 GB do not fit 8 H100s (576 GB usable): a replica spans two nodes (2 x 8), pipeline-parallel.
    h100 = _need(result, H100)
    assert h100.gpus_per_replica == 16 and "spans nodes" in h100.binding["replica"]


def test_405b_spans_nodes_on_h100_and_a_measured_point_replaces_the_model():
    model = reference_models()["llama-3.1-405b"]
    month = ForecastMonth(DEC, requests_per_s=10, prompt_tokens=1000, output_tokens=250)
    h100 = _need(plan_capacity(model, (month,), (H100,)), H100)
    assert h100.gpus_per_replica >= 16  # 810 GB of BF16 weights > 576 GB in one node
    assert h100.binding["replica"].startswith("weights") and h100.gpus_per_replica % 8 == 0
    measured = plan_capacity(model, (month,), (H100,), {H100: Measured(16, 5000.0)})
    need = _need(measured, H100)
    assert need.replicas == 1 and need.throughput_source == "operator measurement"
    # Little's law at the targets: 5,000 / 250 = 20 requests/s x (2 s TTFT + 249 decode steps x 0.2 s) = 1,036.
    assert need.concurrency_per_replica == 1036.0


def test_a_measurement_far_from_the_model_is_named():
    model = reference_models()["llama-3.1-70b"]
    month = ForecastMonth(DEC, requests_per_s=400, prompt_tokens=1000, output_tokens=250)
    assert measured_plausible(model, GB200, "BF16", month, Measured(2, 3000.0)) == ""
    why = measured_plausible(model, GB200, "BF16", month, Measured(72, 1.0))
    assert "outside 0.1x-10x" in why
    assert "cannot serve" in measured_plausible(model, H100, "BF16", month, Measured(1, 1000.0))  # 141 GB > 72 GB


# ---------------------------------------------------------------- independent oracle: brute force from the docs


def _oracle(model: ModelSpec, gpu_model: str, n: int, precision: str, prompt: int, output: int, tpot_ms, ttft_ms):
    """The best output tokens/s of a replica meeting the targets, found by trying batches on a fine geometric
    grid (each 0.2 % above the last, up to 1,500) under both serving policies, with the docs' formulas written
    out again here (not the engine's). None when no batch serves."""
    row = generation(gpu_model)
    wb = {"BF16": 2.0, "FP8": 1.0, "FP4": 0.5}[precision]
    kvb = {"BF16": 2.0, "FP8": 1.0, "FP4": 1.0}[precision]
    tflops = {"BF16": row.dense_bf16_tflops, "FP8": row.dense_fp8_tflops, "FP4": row.dense_fp4_tflops}[precision]
    usable = n * float(row.hbm_gb) * 1e9 * float(parameter("hbm_usable_fraction").low)
    peak = n * float(tflops) * 1e12 * float(parameter("compute_efficiency").low)
    bw = n * float(row.hbm_tb_s) * 1e12 * float(parameter("memory_efficiency").low)
    if model.attention == "mla":
        kv = model.layers * (model.kv_lora_rank + model.qk_rope_head_dim) * kvb
        pre_dims = model.head_dim * 2 + model.qk_rope_head_dim
        dec_dims = 2 * model.kv_lora_rank + model.qk_rope_head_dim
    else:
        kv = 2 * model.layers * model.kv_heads * model.head_dim * kvb
        pre_dims = dec_dims = 2 * model.head_dim
    weights = model.total_params_b * 1e9 * wb
    if weights >= usable:
        return None
    p = max(1, prompt)
    t_pre = (2 * model.active_params_b * 1e9 * p + model.layers * model.attention_heads * pre_dims * p * (p + 1)) / peak
    steps = output - 1
    ctx = prompt + output / 2
    flops = 2 * model.active_params_b * 1e9 + 2 * model.layers * model.attention_heads * dec_dims * ctx

    def step(b):
        if model.routed_experts:
            e, k = model.routed_experts, model.experts_per_token
            touched = e * (1 - (1 - k / e) ** b)
            read = (model.total_params_b - (e - touched) * model.expert_params_b) * 1e9 * wb
        else:
            read = weights
        return max((read + b * ctx * kv) / bw, b * flops / peak)

    best = None
    b = 1.0
    while b <= 1500:
        s = step(b)
        options = []
        if steps:  # continuous batching
            tpot = s + b * t_pre / steps
            rate = b / (steps * tpot)
            options.append((tpot, t_pre + s, b + rate * ttft_ms / 1e3, rate))
        cycle = b * t_pre + steps * s  # static batches
        options.append((s if steps else 0.0, cycle + b * t_pre, b, b / cycle))
        for tpot, ttft, held, rate in options:
            if tpot * 1e3 <= tpot_ms and ttft * 1e3 <= ttft_ms and weights + held * (prompt + output) * kv <= usable:
                best = max(best or 0.0, rate * output)
        b *= 1.002
    return best


SMALL_MODELS = (
    ModelSpec("dense-8b", 8.03, 8.03, 32, 32, 8, 128, 131072),
    ModelSpec("moe-16e", 20.0, 6.0, 24, 16, 4, 128, 65536, routed_experts=16, experts_per_token=2, expert_params_b=1.0),
    ModelSpec(
        "mla-moe",
        40.0,
        8.0,
        27,
        16,
        16,
        128,
        131072,
        attention="mla",
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        routed_experts=64,
        experts_per_token=6,
        expert_params_b=0.5,
    ),
)


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(SMALL_MODELS),
    gpu_model=st.sampled_from([H100, GB200, "A100-SXM4-80GB"]),
    n=st.sampled_from([1, 2]),
    prompt=st.integers(0, 6000),
    output=st.integers(1, 800),
    tpot=st.sampled_from([15.0, 40.0, 100.0]),
    ttft=st.sampled_from([300.0, 2000.0]),
)
def test_the_engine_agrees_with_a_brute_force_over_batches_and_policies(
    model, gpu_model, n, prompt, output, tpot, ttft
):
    from planning.engines.capacity import Assumptions, Gpu, Workload, operating_point

    assume(prompt + output <= model.context_tokens)
    point, _ = operating_point(
        model, Gpu.of(gpu_model), n, "BF16", Workload(prompt, output, tpot / 1e3, ttft / 1e3), Assumptions.load()
    )
    assume(point is None or point.batch < 1400)  # the brute force tries batches up to 1,500
    expected = _oracle(model, gpu_model, n, "BF16", prompt, output, tpot, ttft)
    if expected is None:
        assert point is None
    else:
        # The engine's continuous optimum is at least the best grid batch, and within the grid's 0.2 % step.
        assert point is not None
        assert expected * (1 - 1e-9) <= point.tokens_per_s <= expected * 1.0021


# ---------------------------------------------------------------- metamorphic properties


MODELS = ("llama-3.1-8b", "llama-3.1-70b", "mixtral-8x22b", "deepseek-v3")


def _gpus(result) -> dict[str, int]:
    """GPUs to buy per generation: whole nodes, or whole racks of a rack-scale system."""
    return {n.gpu_model: n.gpus_provisioned for n in result.months[0].needs}


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(MODELS),
    rate=st.floats(0.1, 2000),
    more=st.floats(1.0, 5.0),
    prompt=st.integers(0, 8000),
    output=st.integers(1, 2000),
)
def test_more_demand_never_needs_fewer_gpus(name, rate, more, prompt, output):
    model = reference_models()[name]
    base = plan_capacity(model, (ForecastMonth(DEC, requests_per_s=rate, prompt_tokens=prompt, output_tokens=output),))
    bigger = plan_capacity(
        model, (ForecastMonth(DEC, requests_per_s=rate * more, prompt_tokens=prompt, output_tokens=output),)
    )
    for gpu_model, gpus in _gpus(base).items():
        assert _gpus(bigger)[gpu_model] >= gpus


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(MODELS),
    rate=st.floats(0.1, 500),
    prompt=st.integers(0, 8000),
    output=st.integers(1, 2000),
    longer_prompt=st.integers(0, 8000),
    longer_output=st.integers(0, 2000),
)
def test_a_longer_prompt_or_answer_never_needs_fewer_gpus(name, rate, prompt, output, longer_prompt, longer_output):
    model = reference_models()[name]
    base = _gpus(
        plan_capacity(model, (ForecastMonth(DEC, requests_per_s=rate, prompt_tokens=prompt, output_tokens=output),))
    )
    for p, o in ((prompt + longer_prompt, output), (prompt, output + longer_output)):
        longer = _gpus(
            plan_capacity(model, (ForecastMonth(DEC, requests_per_s=rate, prompt_tokens=p, output_tokens=o),))
        )
        for gpu_model, gpus in longer.items():
            # A generation that can still serve the longer requests needs at least as many GPUs.
            assert gpus >= base.get(gpu_model, 0), (gpu_model, name, rate, prompt, output, p, o)
        assert set(longer) <= set(base)  # and one that could not serve the shorter ones cannot serve these


# ---------------------------------------------------------------- the API and the console


FORECAST = [
    {"month": "2026-08-01", "tokens_per_s": 900_000, "prompt_tokens": 1000, "output_tokens": 250},
    {"month": "2026-10-01", "tokens_per_s": 1_900_000, "prompt_tokens": 1000, "output_tokens": 250},
]


@pytest.fixture
def demo_fleet(db):
    from devtools.services.fleet_seed import seed_fleet

    return seed_fleet(gpus=2048)


def test_a_capacity_plan_becomes_a_migration_in_the_same_unit_feasible_when_the_racks_cover_it(ops_api, demo_fleet):
    # GB200 at 1,000 + 250 tokens and these rates: 7,006.5 output tokens/s per 4-GPU replica (18 a rack).
    # August 900,000 / 7,006.5 = 129 replicas = 516 GPUs = 8 racks: one 8-rack unit;
    # October 1,900,000 -> 272 replicas = 1,088 GPUs = 16 racks: a second unit.
    r = _post(ops_api, {"name": "chat 70B", "model_name": "llama-3.1-70b", "forecast": FORECAST})
    assert r.status_code == 201, r.json()
    result = r.json()["result"]
    assert [g["needed_racks"] for g in result["gap"]] == [8, 16]
    # Each unit arrives a week early: burnt in (24 h) and cut over (1 day) in time for its month.
    assert result["deliveries"] == [
        {"date": "2026-07-25", "scalable_units": 1, "racks_per_unit": 8, "label": "capacity 2026-08"},
        {"date": "2026-09-24", "scalable_units": 1, "racks_per_unit": 8, "label": "capacity 2026-10"},
    ]
    unit = result["unit"]
    assert unit["label"] == "output tokens/s (llama-3.1-70b, BF16, 1,000+250 tokens)"
    # Per GPU at the October peak: GB200 7,006.524 x 18 / 72 = 1,751.631; H100 in 8-GPU replicas 692.945.
    assert unit["per_gpu_model"] == {"GB200-NVL72": 1751.631, "H100-SXM5-80GB": 692.945}
    migration = _post(ops_api, None, url=f"{URL}/{r.json()['id']}/migration-plan")
    assert migration.status_code == 201, migration.json()
    body = migration.json()
    params = body["inputs"]["parameters"]
    assert params["workload"] == "inference" and params["floor_unit"] == "capacity_unit"
    assert params["capacity_floor_schedule"] == [
        {"start": "2026-08-01", "perf": 900_000.0},
        {"start": "2026-10-01", "perf": 1_900_000.0},
    ]
    plan = body["result"]
    assert plan["perf_unit"] == unit["label"]  # the unit, kept: no training H100-equivalents anywhere
    # Today's 2,048 H100s serve 2,048 x 692.945 = 1.419M tokens/s; 16 racks of GB200 serve
    # 1,152 x 1,751.631 = 2.018M >= the October need of 1.9M: the H100s retire once both units serve.
    assert plan["timeline"]["points"][0]["perf_total"] == pytest.approx(2048 * 692.945)
    assert plan["timeline"]["points"][-1]["perf_total"] == pytest.approx(1152 * 1751.631)
    assert body["feasible"] is True and plan["verdicts"]["old_fleet_retired"] is True
    assert plan["verdicts"]["need_met_always"] is True and plan["verdicts"]["trough_perf_days"] == 0
    stored = CapacityPlan.objects.get()
    assert str(stored.migration_plan_id) == body["id"]
    again = _post(ops_api, None, url=f"{URL}/{stored.id}/migration-plan")
    assert again.json()["id"] == body["id"] and MigrationPlan.objects.count() == 1


def test_a_capacity_plan_whose_racks_fall_short_is_infeasible_in_its_unit(ops_api, demo_fleet):
    # The same unit and floor with August's unit alone: 576 GB200 x 1,751.631 = 1.009M tokens/s cannot hold
    # October's 1.9M without the H100s, which therefore cannot retire. The exact fix, in racks of the target:
    # (1.9M - 1.009M) / (72 x 1,751.631 = 126,117 per rack) = 7.07 -> 8 more racks.
    r = _post(ops_api, {"name": "chat 70B", "model_name": "llama-3.1-70b", "forecast": FORECAST})
    migration = _post(ops_api, None, url=f"{URL}/{r.json()['id']}/migration-plan").json()
    params = migration["inputs"]["parameters"]
    body = {
        k: params[k]
        for k in ("start", "target_node_type", "workload", "floor_unit", "capacity_unit", "capacity_floor_schedule")
    }
    short = _post(ops_api, {**body, "deliveries": params["deliveries"][:1]}, url="/api/v1/ops/migration-plans").json()
    assert short["feasible"] is False
    assert any(f.startswith("deliver 8 more gb200-nvl72 racks") for f in short["result"]["fixes"]), short["result"][
        "fixes"
    ]
    assert short["result"]["perf_unit"] == params["capacity_unit"]["label"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "x", "forecast": FORECAST}, "non_field_errors"),
        (
            {"name": "x", "model_name": "llama-3.1-70b", "forecast": [{"month": "2026-08-01", "requests_per_s": 5}]},
            "forecast[0].output_tokens",
        ),
        ({"name": "x", "model_name": "llama-3.1-70b", "forecast": []}, "forecast"),
        ({"name": "x", "model_name": "llama-3.1-70b", "forecast": FORECAST, "concurrency": 64}, "concurrency"),
        (
            {
                "name": "x",
                "model_name": "llama-3.1-70b",
                "forecast": [{**FORECAST[0], "concurrent_sequences_per_replica": 64}],
            },
            "forecast[0].concurrent_sequences_per_replica",
        ),
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
                    "context_tokens": 1,
                },
                "forecast": FORECAST,
            },
            "model.active_params_b",
        ),
        (
            {
                "name": "x",
                "model": {
                    "name": "m",
                    "total_params_b": 8,
                    "active_params_b": 8,
                    "layers": 32,
                    "kv_heads": 8,
                    "head_dim": 128,
                    "context_tokens": 8192,
                    "bytes_per_element": 2,
                },
                "forecast": FORECAST,
            },
            "model.bytes_per_element",
        ),
        ({"name": "x", "model_name": "llama-3.1-70b", "forecast": FORECAST, "precision": "INT4"}, "precision"),
        (
            {"name": "x", "model_name": "llama-3.1-70b", "forecast": [{**FORECAST[0], "prompt_tokens": 200_000}]},
            "forecast[0].prompt_tokens",
        ),
        (
            {
                "name": "x",
                "model_name": "llama-3.1-70b",
                "forecast": FORECAST,
                "measured": {"GB200-NVL72": {"gpus_per_replica": 72, "tokens_per_s": 1}},
            },
            "measured.GB200-NVL72.tokens_per_s",
        ),
        (
            {
                "name": "x",
                "model_name": "llama-3.1-70b",
                "forecast": FORECAST,
                "measured": {"GB200-NVL72": {"gpus_per_replica": 2, "tokens_per_s": 3000, "gpus": 2}},
            },
            "measured.GB200-NVL72.gpus",
        ),
        ({"name": "x", "model_name": "gpt-9", "forecast": FORECAST}, "model_name"),
        (
            {"name": "x", "model_name": "llama-3.1-70b", "forecast": FORECAST, "target_gpu_model": "Z9"},
            "target_gpu_model",
        ),
    ],
)
def test_bad_capacity_input_is_a_400_naming_the_field(ops_api, db, body, field):
    r = _post(ops_api, body)
    assert r.status_code == 400 and r.json()["code"] == "validation_error", r.json()
    assert field in [e["field"] for e in r.json()["errors"]], r.json()["errors"]
    assert not CapacityPlan.objects.exists()


def test_an_implausible_measurement_is_kept_only_when_confirmed(ops_api, db):
    # 1 token/s per 72-GPU replica is 0.00004x the model's estimate: refused unless confirmed.
    measured = {"GB200-NVL72": {"gpus_per_replica": 72, "tokens_per_s": 1, "confirm_implausible": True}}
    body = {"name": "x", "model_name": "llama-3.1-70b", "forecast": FORECAST[:1], "measured": measured}
    r = _post(ops_api, body)
    assert r.status_code == 201, r.json()
    need = r.json()["result"]["months"][0]["needs"][0]
    assert need["throughput_source"].startswith("operator measurement (confirmed")
    assert need["replicas"] == 900_000


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


def test_console_sizes_shows_the_figures_and_turns_the_gap_into_a_migration(
    operator_client, demo_fleet, django_assert_max_num_queries
):
    data = {
        "name": "console",
        "model_name": "llama-3.1-70b",
        "prompt_tokens": "1000",
        "output_tokens": "250",
        "target_gpu_model": "GB200-NVL72",
        "month_0": "2026-08-01",
        "tokens_0": "900000",
        "month_1": "2026-10-01",
        "tokens_1": "1900000",
    }
    r = operator_client.post("/plans/capacity/", data)
    plan = CapacityPlan.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/plans/capacity/{plan.pk}/"
    with django_assert_max_num_queries(4):  # session, user, plan, list count-free
        html = operator_client.get(f"/plans/capacity/{plan.pk}/").content.decode()
    assert 'id="chart-need-data"' in html and 'id="chart-kw-data"' in html and 'id="to-migration"' in html
    # The sizing's figures and binding constraints, and the unit a migration will keep.
    assert "Little&#x27;s law" in html and "batch: memory" in html and "Prefill minimum" in html
    assert "output tokens/s (llama-3.1-70b, BF16, 1,000+250 tokens)" in html
    r = operator_client.post(f"/plans/capacity/{plan.pk}/migration/")
    migration = MigrationPlan.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/plans/{migration.pk}/"
    page = operator_client.get(f"/plans/{migration.pk}/").content.decode()
    assert "counted in output tokens/s (llama-3.1-70b" in page and 'id="drains"' in page
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
    "name": "own MLA MoE",
    "model_name": "custom",
    "custom_name": "my-moe",
    "custom_total_params_b": "40",
    "custom_active_params_b": "8",
    "custom_layers": "27",
    "custom_attention_heads": "16",
    "custom_kv_heads": "16",
    "custom_head_dim": "128",
    "custom_context_tokens": "32768",
    "custom_precision": "FP8",
    "custom_attention": "mla",
    "custom_kv_lora_rank": "512",
    "custom_qk_rope_head_dim": "64",
    "custom_routed_experts": "64",
    "custom_experts_per_token": "6",
    "custom_expert_params_b": "0.5",
    "prompt_tokens": "1000",
    "output_tokens": "250",
    "target_gpu_model": "GB200-NVL72",
    "month_0": "2026-08-01",
    "tokens_0": "100000",
}


def test_console_form_takes_a_custom_mla_moe_model_within_bounds(operator_client, demo_fleet):
    r = operator_client.post("/plans/capacity/", CUSTOM)
    plan = CapacityPlan.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/plans/capacity/{plan.pk}/"
    model = plan.result["model"]
    assert (model["name"], model["attention"], model["routed_experts"], model["precision"]) == (
        "my-moe",
        "mla",
        64,
        "FP8",
    )
    # MLA at FP8: 27 layers x (512 + 64) x 1 byte = 15,552 B per token; weights 40B x 1 byte.
    assert plan.result["kv_bytes_per_token"] == 15_552 and plan.result["weight_gb"] == 40.0
    for change, field in (
        ({"custom_layers": "0"}, "model.layers"),
        ({"custom_precision": "FP16"}, "model.precision"),
        ({"custom_total_params_b": "1e9"}, "model.total_params_b"),
        ({"custom_active_params_b": "90"}, "model.active_params_b"),  # more active than total parameters
        ({"custom_kv_lora_rank": ""}, "model.kv_lora_rank"),  # MLA without its latent
        ({"custom_experts_per_token": "65"}, "model.experts_per_token"),
        ({"custom_head_dim": ""}, "model.head_dim"),  # a blank figure is missing, not zero
    ):
        bad = operator_client.post("/plans/capacity/", {**CUSTOM, **change})
        assert bad.status_code == 400, change
        assert field in [e["field"] for e in bad.context["errors"]], (change, bad.context["errors"])
        assert b"form-errors" in bad.content and bad.context["form"]["custom_name"] == "my-moe"
    assert CapacityPlan.objects.count() == 1


def test_every_reference_model_is_consistent_with_its_own_figures():
    """models.csv both ways: each MoE's experts add up within its totals, and its dense part plus k experts is
    its active count within 2 %; each MLA model caches a latent."""
    for model in reference_models().values():
        assert model.active_params_b <= model.total_params_b
        if model.moe:
            dense = model.total_params_b - model.routed_experts * model.expert_params_b
            assert dense > 0
            assert math.isclose(
                dense + model.experts_per_token * model.expert_params_b, model.active_params_b, rel_tol=0.02
            )
        if model.mla:
            assert model.kv_lora_rank > 0 and model.qk_rope_head_dim > 0


def test_console_measured_point_is_checked_like_the_api(operator_client, db):
    data = {
        "name": "measured",
        "model_name": "llama-3.1-70b",
        "prompt_tokens": "1000",
        "output_tokens": "250",
        "target_gpu_model": "GB200-NVL72",
        "month_0": "2026-08-01",
        "tokens_0": "900000",
        "measured_gpu_model": "GB200-NVL72",
        "measured_gpus_per_replica": "72",
        "measured_tokens_per_s": "1",
    }
    bad = operator_client.post("/plans/capacity/", data)
    assert bad.status_code == 400
    assert "measured.GB200-NVL72.tokens_per_s" in [e["field"] for e in bad.context["errors"]]
    assert bad.context["form"]["measured_tokens_per_s"] == "1"  # what was typed stays
    kept = operator_client.post("/plans/capacity/", {**data, "measured_confirm": "yes"})
    assert kept.status_code == 302
    need = CapacityPlan.objects.get().result["months"][0]["needs"][0]
    assert need["throughput_source"].startswith("operator measurement")
