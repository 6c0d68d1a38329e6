"""Capacity plan: from a traffic forecast and a model to GPUs, racks and kW per generation.

Pure and deterministic (no Django, no database, no clock). The chain, per month and per GPU
generation of the catalogue:

1. **Traffic.** Output tokens/s = requests/s x output tokens per request, or as given: the
   reference point counts generated tokens (its prefill of its own prompts included; prompts much
   longer than a chat turn need a measurement).
2. **Memory follows total parameters.** Weights = total params x bytes per element. The KV
   cache per token = 2 (K and V) x layers x KV heads x head dim x bytes per element. A replica
   holds the weights plus the KV cache of its concurrent sequences (prompt + output tokens each,
   at most the context length; the full context when no token counts are given), in
   ``hbm_usable_fraction`` of its GPUs' HBM; GPUs per replica is the smallest power of two that
   fits (within the NVLink domain).
3. **Throughput follows active parameters.** Decode is memory-bandwidth bound: a replica's
   tokens/s is the reference operating point (tokens/s of 8 H100s on a 69B dense model,
   MLPerf) x (69B / active params) x (the generation's inference ratio to an H100) x (replica
   GPUs / 8), unless the operator gives a measured tokens/s per replica.
4. **Replicas** = tokens/s needed / tokens/s per replica, rounded up; GPUs = replicas x GPUs
   per replica; racks = GPUs / GPUs per rack, rounded up; kW = racks x rack kW.

The reference point is measured at a latency bound (TPOT 200 ms); a tighter latency target
than that is reported as needing the operator's own measurement rather than silently assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date
from functools import cache

from core.reference_data import generation as reference_generation
from core.reference_data import generations, parameter, table

REFERENCE_GPUS = 8


@dataclass(frozen=True)
class ModelSpec:
    name: str
    total_params_b: float
    active_params_b: float
    layers: int
    kv_heads: int
    head_dim: int
    bytes_per_element: int
    context_tokens: int
    source: str = "operator input"

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_element

    @property
    def weight_bytes(self) -> float:
        return self.total_params_b * 1e9 * self.bytes_per_element


@cache
def reference_models() -> dict[str, ModelSpec]:
    """The sourced defaults (core/reference/models.csv): a dense 70B, a dense 405B, a large MoE."""
    return {
        row["model"]: ModelSpec(
            row["model"],
            float(row["total_params_b"]),
            float(row["active_params_b"]),
            int(row["layers"]),
            int(row["kv_heads"]),
            int(row["head_dim"]),
            int(row["bytes_per_element"]),
            int(row["context_tokens"]),
            f"models.csv: {row['source']}",
        )
        for row in table("models.csv")
    }


@dataclass(frozen=True)
class ForecastMonth:
    """One month of demand; give ``requests_per_s`` (with token counts) or ``tokens_per_s``."""

    month: date
    requests_per_s: float | None = None
    tokens_per_s: float | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    tpot_ms_target: float | None = None
    concurrent_sequences_per_replica: int = 64

    @property
    def demand_tokens_per_s(self) -> float:
        """Output tokens per second."""
        if self.tokens_per_s is not None:
            return self.tokens_per_s
        assert self.requests_per_s is not None
        return self.requests_per_s * self.output_tokens

    def sequence_tokens(self, context: int) -> int:
        tokens = self.prompt_tokens + self.output_tokens
        return min(context, tokens) if tokens > 0 else context


@dataclass(frozen=True)
class GenerationNeed:
    gpu_model: str
    generation: str
    gpus_per_replica: int
    tokens_per_s_per_replica: float
    throughput_source: str
    replicas: int
    gpus: int
    racks: int
    kw: float
    gpus_per_rack: int


@dataclass(frozen=True)
class MonthPlan:
    month: date
    tokens_per_s: float
    needs: tuple[GenerationNeed, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class CapacityResult:
    model: ModelSpec
    kv_bytes_per_token: int
    weight_gb: float
    months: tuple[MonthPlan, ...]
    assumptions: tuple[tuple[str, str, str], ...]


def _gen_figures(gpu_model: str) -> tuple[int, float, int, float]:
    """(gpus per rack, kW per rack, NVLink domain, HBM GB) from generations.csv."""
    row = reference_generation(gpu_model)
    if row.node_kw is None:
        gpus_rack, rack_kw = row.nvlink_domain_gpus, float(row.rack_kw_typical)
    else:
        per_rack = int((row.rack_kw_typical / row.node_kw).to_integral_value()) if row.rack_kw_typical else 1
        gpus_rack, rack_kw = per_rack * row.gpus_per_node, float(row.node_kw) * per_rack
    return gpus_rack, rack_kw, row.nvlink_domain_gpus, float(row.hbm_gb or 0)


def replica_bytes(model: ModelSpec, concurrent: int, sequence_tokens: int) -> float:
    """Weights plus the KV cache of ``concurrent`` sequences of ``sequence_tokens`` each."""
    return model.weight_bytes + concurrent * sequence_tokens * model.kv_bytes_per_token


def gpus_per_replica(model: ModelSpec, gpu_model: str, concurrent: int, sequence_tokens: int) -> int:
    """Smallest power of two whose usable HBM holds ``replica_bytes`` (0 when even the NVLink
    domain cannot)."""
    _, _, domain, hbm_gb = _gen_figures(gpu_model)
    usable = float(parameter("hbm_usable_fraction").low)
    need = replica_bytes(model, concurrent, sequence_tokens)
    n = 1
    while n <= domain:
        if n * hbm_gb * 1e9 * usable >= need:
            return n
        n *= 2
    return 0


def plan_capacity(
    model: ModelSpec,
    forecast: tuple[ForecastMonth, ...],
    gpu_models: tuple[str, ...] | None = None,
    measured_tokens_per_s: dict[str, tuple[int, float]] | None = None,
) -> CapacityResult:
    """GPUs, racks and kW per month and generation. ``measured_tokens_per_s`` maps a GPU model to
    (GPUs per replica, tokens/s per replica) the operator measured; it replaces the reference point."""
    ref = parameter("reference_tokens_per_s_llama2_70b_8x_h100")
    ref_params = float(parameter("reference_model_active_params_b").low)
    ref_tpot = float(parameter("reference_tpot_ms").low)
    measured = measured_tokens_per_s or {}
    models = gpu_models or tuple(r.gpu_model for r in generations() if r.hbm_gb is not None and r.inference_vs_h100)
    months = []
    for month in forecast:
        demand = month.demand_tokens_per_s
        needs, notes = [], []
        if month.tpot_ms_target is not None and month.tpot_ms_target < ref_tpot and not measured:
            notes.append(
                f"latency target {month.tpot_ms_target:g} ms per output token is tighter than the reference "
                f"point's {ref_tpot:g} ms: measure tokens/s per replica at your target and give it"
            )
        for gpu_model in models:
            row = reference_generation(gpu_model)
            gpus_rack, rack_kw, _, _ = _gen_figures(gpu_model)
            if gpu_model in measured:
                n, per_replica = measured[gpu_model]
                source = "operator measurement"
            else:
                n = gpus_per_replica(
                    model,
                    gpu_model,
                    month.concurrent_sequences_per_replica,
                    month.sequence_tokens(model.context_tokens),
                )
                if n == 0:
                    notes.append(f"{gpu_model}: {model.name} does not fit one NVLink domain; not planned")
                    continue
                per_replica = (
                    float(ref.low)
                    * (ref_params / model.active_params_b)
                    * float(row.inference_vs_h100)
                    * n
                    / REFERENCE_GPUS
                )
                source = (
                    f"{ref.value} {ref.unit} x {ref_params:g}B / {model.active_params_b:g}B active x "
                    f"{row.inference_vs_h100} (inference_vs_h100) x {n}/{REFERENCE_GPUS} GPUs"
                )
            replicas = math.ceil(demand / per_replica - 1e-9) if demand > 0 else 0
            gpus = replicas * n
            racks = math.ceil(gpus / gpus_rack) if gpus else 0
            needs.append(
                GenerationNeed(
                    gpu_model,
                    row.generation,
                    n,
                    round(per_replica, 3),
                    source,
                    replicas,
                    gpus,
                    racks,
                    round(racks * rack_kw, 3),
                    gpus_rack,
                )
            )
        months.append(MonthPlan(month.month, round(demand, 3), tuple(needs), tuple(notes)))
    assumptions = (
        ("reference throughput", f"{ref.value} {ref.unit}", ref.source),
        ("reference model", f"{ref_params:g}B active", parameter("reference_model_active_params_b").source),
        (
            "reference latency",
            parameter("reference_latency_llama2_70b_server").value,
            parameter("reference_latency_llama2_70b_server").source,
        ),
        ("hbm_usable_fraction", parameter("hbm_usable_fraction").value, parameter("hbm_usable_fraction").source),
        ("model", model.name, model.source),
    )
    return CapacityResult(
        model, model.kv_bytes_per_token, round(model.weight_bytes / 1e9, 3), tuple(months), assumptions
    )


def gap_deliveries(
    result: CapacityResult, gpu_model: str, existing_gpus: int, racks_per_unit: int = 8, lead_weeks: int = 0
) -> list[dict]:
    """Migration-plan deliveries that keep ``gpu_model`` capacity at each month's need: whole
    scalable units of ``racks_per_unit`` racks, arriving on the first day of the month that needs them."""
    have_racks = None
    deliveries = []
    for month in result.months:
        need = next((n for n in month.needs if n.gpu_model == gpu_model), None)
        if need is None:
            continue
        gap_gpus = max(0, need.gpus - existing_gpus)
        racks = math.ceil(gap_gpus / need.gpus_per_rack) if gap_gpus else 0
        have = have_racks or 0
        if racks > have:
            units = math.ceil((racks - have) / racks_per_unit)
            deliveries.append(
                {
                    "date": month.month.isoformat(),
                    "scalable_units": units,
                    "racks_per_unit": racks_per_unit,
                    "label": f"capacity {month.month:%Y-%m}",
                }
            )
            have_racks = have + units * racks_per_unit
    return deliveries
