"""Capacity plan from first principles: a traffic forecast and a model to replicas, GPUs, racks and kW.

Pure and deterministic (no Django, no database, no clock). Every figure comes from
``core/reference``: the GPU's HBM size and bandwidth and its dense tensor throughput at the
plan's precision (``generations.csv``), the model's shape (``models.csv`` or the operator's
figures from its ``config.json``) and the serving assumptions (``inference.csv``). Per forecast
month and per GPU generation, for every replica size that holds the weights:

1. **Prefill** (time to first token). A prompt of P tokens costs 2 x active parameters x P
   FLOPs for the matrix multiplications plus causal attention, layers x heads x (d_qk + d_v) x
   P x (P + 1); at ``compute_efficiency`` of the replica's dense peak at the precision it takes
   ``t_prefill`` seconds.
2. **Decode step** at a batch of B sequences is the larger of its memory time and its compute
   time (a roofline): the weights are read once per step (a mixture of experts reads the experts
   the batch touches: E x (1 - (1 - k/E)^B) per layer, plus the dense part) and every sequence's
   KV cache is read (its average context: P + (O + 1)/2 tokens), at ``memory_efficiency`` of the
   HBM bandwidth; the compute is B x (2 x active parameters + attention over that context).
3. **Latency and Little's law.** Prefills share the replica with decoding: B/O sequences finish
   per step, so B/O prefills run per step and the time per output token is
   TPOT(B) = step(B) + B x t_prefill / O. A replica serves r = B / (O x TPOT) requests/s; the
   sequences it holds are L = r x (TTFT + O x TPOT) (Little's law, TTFT at its target: waiting
   and prefilling requests hold their KV cache too).
4. **Batch** = the largest B whose TPOT and TTFT (prefill + one step) meet their targets and
   whose memory, weights + L x (P + O) x KV bytes per token, fits ``hbm_usable_fraction`` of the
   replica's HBM. Each test is monotone in B, so the largest B is found by bisection; the one
   that stops it is the batch's binding constraint.
5. **Replica size.** Powers of two within the NVLink domain, then whole nodes (pipeline-parallel
   across nodes over the scale-out fabric) or whole NVL racks; the size needing the fewest GPUs
   for the month's demand wins (ties: the smaller). Replicas = demand / tokens per second per
   replica, rounded up; they are packed into nodes and racks (a replica never spans NVLink
   domains unless it is whole nodes or racks), which gives GPUs, racks and kW.

Precision (BF16, FP8, FP4) changes the bytes per weight, the KV cache's bytes (``kv_cache_precision``)
and the tensor throughput used; a generation without tensor cores for it is not planned. An
operator's measured operating point (GPUs per replica, tokens/s per replica) replaces steps 1-5
for its generation; it is checked against this model's estimate (``measured_plausible``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from functools import cache

from core.reference_data import generation as reference_generation
from core.reference_data import generations, parameter, table

PRECISIONS = ("BF16", "FP8", "FP4")
WEIGHT_BYTES = {"BF16": 2.0, "FP8": 1.0, "FP4": 0.5}
# kv_cache_precision (inference.csv): the KV cache follows the weights down to FP8.
KV_BYTES = {"BF16": 2.0, "FP8": 1.0, "FP4": 1.0}
# A measured operating point further than this from the model's estimate needs a confirmation.
PLAUSIBLE_RATIO = (0.1, 10.0)
# Largest batch the bisection considers (a replica of 144 GPUs at FP4 holds far fewer sequences).
MAX_BATCH = 1 << 24
MAX_NODES_PER_REPLICA = 8
MAX_RACKS_PER_REPLICA = 4


class UnknownGpu(KeyError):
    """A GPU model that ``generations.csv`` does not have."""


@dataclass(frozen=True)
class ModelSpec:
    """A model's shape from its ``config.json``.

    ``attention`` is ``gqa`` (grouped-query or multi-head: K and V per KV head) or ``mla``
    (multi-head latent attention: one latent of ``kv_lora_rank`` plus a shared RoPE key of
    ``qk_rope_head_dim`` cached per token and layer). A mixture of experts gives
    ``routed_experts`` (E), ``experts_per_token`` (k) and ``expert_params_b``, one routed expert's
    parameters summed over its layers; the rest of ``total_params_b`` (attention, embeddings,
    dense and shared-expert layers) is read every step. ``precision`` is the native one.
    """

    name: str
    total_params_b: float
    active_params_b: float
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    context_tokens: int
    precision: str = "BF16"
    attention: str = "gqa"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    routed_experts: int = 0
    experts_per_token: int = 0
    expert_params_b: float = 0.0
    source: str = "operator input"

    @property
    def moe(self) -> bool:
        return self.routed_experts > 0 and self.experts_per_token > 0

    @property
    def mla(self) -> bool:
        return self.attention == "mla"

    def kv_bytes_per_token(self, precision: str) -> float:
        """Bytes cached per token: MLA keeps latent + RoPE key per layer; GQA keeps K and V per KV head."""
        b = KV_BYTES[precision]
        if self.mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * b
        return 2 * self.layers * self.kv_heads * self.head_dim * b

    def weight_bytes(self, precision: str) -> float:
        return self.total_params_b * 1e9 * WEIGHT_BYTES[precision]

    def experts_touched(self, batch: float) -> float:
        """Expected distinct routed experts per MoE layer that a decode step of ``batch`` tokens reads."""
        if not self.moe:
            return 0.0
        e, k = self.routed_experts, self.experts_per_token
        return e * (1 - (1 - k / e) ** batch)

    def decode_weight_bytes(self, precision: str, batch: float) -> float:
        """Weights one decode step reads: all of a dense model; the dense part plus the touched experts of a MoE."""
        if not self.moe:
            return self.weight_bytes(precision)
        dense = self.total_params_b - self.routed_experts * self.expert_params_b
        return (dense + self.experts_touched(batch) * self.expert_params_b) * 1e9 * WEIGHT_BYTES[precision]

    def _attention_dims(self, phase: str) -> tuple[int, int]:
        """(d_qk, d_v) per head: MLA prefills in full heads and decodes against the latent (absorbed)."""
        if not self.mla:
            return self.head_dim, self.head_dim
        if phase == "prefill":
            return self.head_dim + self.qk_rope_head_dim, self.head_dim
        return self.kv_lora_rank + self.qk_rope_head_dim, self.kv_lora_rank

    def prefill_flops(self, prompt: int) -> float:
        """2 x active parameters per token plus causal attention over the prompt."""
        dqk, dv = self._attention_dims("prefill")
        attention = self.layers * self.attention_heads * (dqk + dv) * prompt * (prompt + 1)
        return 2 * self.active_params_b * 1e9 * prompt + attention

    def decode_flops_per_token(self, context: float) -> float:
        dqk, dv = self._attention_dims("decode")
        return 2 * self.active_params_b * 1e9 + 2 * self.layers * self.attention_heads * (dqk + dv) * context


def _int(text: str) -> int:
    return int(text) if text.strip() else 0


def _float(text: str) -> float:
    return float(text) if text.strip() else 0.0


@cache
def reference_models() -> dict[str, ModelSpec]:
    """The sourced defaults (core/reference/models.csv): dense GQA models, a GQA MoE and MLA MoEs."""
    return {
        row["model"]: ModelSpec(
            name=row["model"],
            total_params_b=float(row["total_params_b"]),
            active_params_b=float(row["active_params_b"]),
            layers=int(row["layers"]),
            attention_heads=int(row["attention_heads"]),
            kv_heads=int(row["kv_heads"]),
            head_dim=int(row["head_dim"]),
            context_tokens=int(row["context_tokens"]),
            precision=row["precision"],
            attention=row["attention"],
            kv_lora_rank=_int(row["kv_lora_rank"]),
            qk_rope_head_dim=_int(row["qk_rope_head_dim"]),
            routed_experts=_int(row["routed_experts"]),
            experts_per_token=_int(row["experts_per_token"]),
            expert_params_b=_float(row["expert_params_b"]),
            source=f"models.csv: {row['source']}",
        )
        for row in table("models.csv")
    }


@dataclass(frozen=True)
class ForecastMonth:
    """One month of demand: requests/s (or output tokens/s) with its prompt and output tokens per
    request and the latency targets (default: the reference point's, inference.csv)."""

    month: date
    requests_per_s: float | None = None
    tokens_per_s: float | None = None
    prompt_tokens: int = 0
    output_tokens: int = 1
    tpot_ms_target: float | None = None
    ttft_ms_target: float | None = None

    @property
    def demand_tokens_per_s(self) -> float:
        """Output tokens per second."""
        if self.tokens_per_s is not None:
            return self.tokens_per_s
        assert self.requests_per_s is not None
        return self.requests_per_s * self.output_tokens

    @property
    def demand_requests_per_s(self) -> float:
        if self.requests_per_s is not None:
            return self.requests_per_s
        return self.demand_tokens_per_s / max(1, self.output_tokens)


@dataclass(frozen=True)
class Assumptions:
    """The serving assumptions, loaded once from inference.csv."""

    usable: float
    compute_efficiency: float
    memory_efficiency: float
    tpot_ms: float
    ttft_ms: float

    @classmethod
    def load(cls) -> Assumptions:
        def low(name: str) -> float:
            row = parameter(name)
            assert row.low is not None, name
            return float(row.low)

        return cls(
            low("hbm_usable_fraction"),
            low("compute_efficiency"),
            low("memory_efficiency"),
            low("reference_tpot_ms"),
            low("reference_ttft_ms"),
        )


@dataclass(frozen=True)
class Gpu:
    """What the sizing needs of one generations.csv row."""

    gpu_model: str
    generation: str
    hbm_gb: float
    hbm_tb_s: float
    tflops: dict[str, float]
    gpus_per_node: int
    nvlink_domain: int
    rack_scale: bool
    gpus_per_rack: int
    node_kw: float | None
    rack_kw: float

    @classmethod
    def of(cls, gpu_model: str) -> Gpu:
        try:
            row = reference_generation(gpu_model)
        except KeyError as exc:
            raise UnknownGpu(gpu_model) from exc
        tflops = {
            p: float(v)
            for p, v in (("BF16", row.dense_bf16_tflops), ("FP8", row.dense_fp8_tflops), ("FP4", row.dense_fp4_tflops))
            if v is not None
        }
        if row.node_kw is None:
            assert row.rack_kw_typical is not None
            per_rack, rack_kw = row.nvlink_domain_gpus, float(row.rack_kw_typical)
        else:
            nodes = int((row.rack_kw_typical / row.node_kw).to_integral_value()) if row.rack_kw_typical else 1
            per_rack, rack_kw = nodes * row.gpus_per_node, float(row.node_kw) * nodes
        return cls(
            row.gpu_model,
            row.generation,
            float(row.hbm_gb or 0),
            float(row.hbm_tb_s or 0),
            tflops,
            row.gpus_per_node,
            row.nvlink_domain_gpus,
            row.node_kw is None,
            per_rack,
            float(row.node_kw) if row.node_kw is not None else None,
            rack_kw,
        )

    def replica_sizes(self) -> list[int]:
        """Powers of two within the NVLink domain, the whole domain, then whole nodes or racks."""
        sizes = []
        n = 1
        while n < self.nvlink_domain:
            sizes.append(n)
            n *= 2
        sizes.append(self.nvlink_domain)
        unit, most = (
            (self.gpus_per_rack, MAX_RACKS_PER_REPLICA)
            if self.rack_scale
            else (self.gpus_per_node, MAX_NODES_PER_REPLICA)
        )
        k = 2
        while k <= most:
            if unit * k > self.nvlink_domain:
                sizes.append(unit * k)
            k *= 2
        return sorted(set(sizes))

    def pack(self, replicas: int, n: int) -> tuple[int, int, int, float]:
        """(nodes, GPUs provisioned, racks, kW) for ``replicas`` of ``n`` GPUs."""
        if self.rack_scale:
            if n <= self.gpus_per_rack:
                racks = math.ceil(replicas / (self.gpus_per_rack // n)) if replicas else 0
            else:
                racks = replicas * math.ceil(n / self.gpus_per_rack)
            nodes = racks * (self.gpus_per_rack // self.gpus_per_node)
            return nodes, racks * self.gpus_per_rack, racks, racks * self.rack_kw
        if n <= self.gpus_per_node:
            nodes = math.ceil(replicas / (self.gpus_per_node // n)) if replicas else 0
        else:
            nodes = replicas * math.ceil(n / self.gpus_per_node)
        per_rack = self.gpus_per_rack // self.gpus_per_node
        assert self.node_kw is not None
        return nodes, nodes * self.gpus_per_node, math.ceil(nodes / per_rack), nodes * self.node_kw

    def per_unit(self, n: int) -> tuple[int, int]:
        """(replicas, GPUs) of one full packing unit (a node or rack, or as many as one replica spans)."""
        unit = self.gpus_per_rack if self.rack_scale else self.gpus_per_node
        if n <= unit:
            return unit // n, unit
        return 1, math.ceil(n / unit) * unit


@dataclass(frozen=True)
class OperatingPoint:
    """One replica of ``gpus`` GPUs at its largest batch that meets the targets."""

    gpus: int
    batch: float
    tokens_per_s: float
    requests_per_s: float
    concurrency: float
    tpot_ms: float
    ttft_ms: float
    step_ms: float
    step_bound: str
    prefill_ms: float
    prefill_share: float
    weights_read_gb: float
    kv_read_gb: float
    experts_touched: float
    weights_gb: float
    kv_gb: float
    usable_gb: float
    batch_bound: str
    policy: str = "continuous"


@dataclass(frozen=True)
class Workload:
    """A month's per-request shape and targets, resolved."""

    prompt: int
    output: int
    tpot_s: float
    ttft_s: float


BOUND_TEXT = {
    "tpot": "the TPOT target",
    "ttft": "the TTFT target",
    "memory": "HBM (weights + KV cache of the sequences held)",
    "batch": "the largest batch considered",
}
POLICY_TEXT = {
    "continuous": "continuous batching (prefills interleaved with decode steps)",
    "static": "static batches (prefill a batch, then decode it to the end)",
}


@dataclass(frozen=True)
class Refusal:
    """Why a replica of ``gpus`` GPUs cannot serve: ``kind`` is weights, memory, tpot or ttft."""

    gpus: int
    kind: str
    text: str


@dataclass(frozen=True)
class _Replica:
    """The figures of one replica that do not depend on the batch."""

    usable: float
    weights: float
    kv: float
    context: float
    decode_steps: int
    t_prefill: float
    bandwidth: float
    peak: float
    flops_token: float
    dense_bytes: float  # read every step: all weights of a dense model, the non-expert part of a MoE
    expert_bytes: float  # one routed expert's weights (0 for a dense model)
    experts: int
    top_k: int

    def step(self, b: float) -> tuple[float, float]:
        """(memory time, compute time) of one decode step at a batch of ``b`` sequences: the weights read
        once (a MoE: the experts the batch touches, E x (1 - (1 - k/E)^b) per layer), every sequence's KV."""
        read = self.dense_bytes
        if self.experts:
            read += self.experts * (1 - (1 - self.top_k / self.experts) ** b) * self.expert_bytes
        return (read + b * self.context * self.kv) / self.bandwidth, b * self.flops_token / self.peak


def _replica(model: ModelSpec, gpu: Gpu, n: int, precision: str, w: Workload, a: Assumptions) -> _Replica:
    context = w.prompt + w.output / 2  # the k-th decode step attends to P + k tokens, k = 1 .. O - 1
    peak = n * gpu.tflops[precision] * 1e12 * a.compute_efficiency
    per_weight = WEIGHT_BYTES[precision]
    expert = model.expert_params_b * 1e9 * per_weight if model.moe else 0.0
    weights = model.weight_bytes(precision)
    return _Replica(
        usable=n * gpu.hbm_gb * 1e9 * a.usable,
        weights=weights,
        kv=model.kv_bytes_per_token(precision),
        context=context,
        decode_steps=w.output - 1,
        t_prefill=model.prefill_flops(max(1, w.prompt)) / peak,
        bandwidth=n * gpu.hbm_tb_s * 1e12 * a.memory_efficiency,
        peak=peak,
        flops_token=model.decode_flops_per_token(context),
        dense_bytes=weights - model.routed_experts * expert if model.moe else weights,
        expert_bytes=expert,
        experts=model.routed_experts if model.moe else 0,
        top_k=model.experts_per_token if model.moe else 0,
    )


# A policy maps a batch to (TPOT s, TTFT s, sequences held, requests/s); each rises with the batch.
Figures = tuple[float, float, float, float]


def _continuous(r: _Replica, w: Workload) -> Callable[[float], Figures]:
    """Continuous batching: B sequences decode; the B / (O - 1) prefills each step retires run between steps.
    TPOT = step + B x prefill / (O - 1); TTFT = prefill + one step; requests/s = B / ((O - 1) x TPOT);
    sequences held (Little's law) = B + requests/s x the TTFT target."""

    def figures(b: float) -> Figures:
        step = max(r.step(b))
        tpot = step + b * r.t_prefill / r.decode_steps
        rate = b / (r.decode_steps * tpot)
        return tpot, r.t_prefill + step, b + rate * w.ttft_s, rate

    return figures


def _static(r: _Replica, w: Workload) -> Callable[[float], Figures]:
    """Static batches: prefill B prompts, then decode them together to the end: a cycle of
    B x prefill + (O - 1) x step. TPOT = step; TTFT, at worst, one whole cycle of waiting plus the batch's
    prefill; requests/s = B / cycle; the B sequences are what is held."""

    def figures(b: float) -> Figures:
        step = max(r.step(b))
        cycle = b * r.t_prefill + r.decode_steps * step
        return (step if r.decode_steps else 0.0), cycle + b * r.t_prefill, b, b / cycle

    return figures


def _largest_batch(failing: Callable[[float], str]) -> float:
    """The largest real batch >= 1 that ``failing`` accepts (every test rises with the batch): double, then
    bisect to a relative 1e-7. A batch is an average over time, so it need not be whole."""
    lo, hi = 1.0, 2.0
    while hi <= MAX_BATCH and not failing(hi):
        lo, hi = hi, hi * 2
    if hi > MAX_BATCH:
        return float(MAX_BATCH)
    while hi - lo > 1e-7 * hi:
        mid = (lo + hi) / 2
        if failing(mid):
            hi = mid
        else:
            lo = mid
    return lo


def _serve(
    model: ModelSpec, precision: str, r: _Replica, w: Workload, name: str, figures: Callable[[float], Figures], n: int
) -> tuple[OperatingPoint | None, Refusal | None]:
    per_sequence = (w.prompt + w.output) * r.kv
    room = r.usable - r.weights

    def failing(b: float) -> str:
        tpot, ttft, held, _ = figures(b)
        if tpot > w.tpot_s:
            return "tpot"
        if ttft > w.ttft_s:
            return "ttft"
        if held * per_sequence > room:
            return "memory"
        return ""

    first = failing(1.0)
    if first:
        tpot, ttft, _, _ = figures(1.0)
        if first == "tpot":
            text = f"one sequence already takes {tpot * 1e3:,.1f} ms per output token on {n} GPUs"
        elif first == "ttft":
            text = f"a {w.prompt:,}-token prompt takes {ttft * 1e3:,.0f} ms to its first token on {n} GPUs"
        else:
            text = f"weights + one sequence's KV cache do not fit {n} GPUs"
        return None, Refusal(n, first, text)
    b = _largest_batch(failing)
    t_mem, t_cmp = r.step(b)
    tpot, ttft, held, rate = figures(b)
    return (
        OperatingPoint(
            gpus=n,
            batch=b,
            tokens_per_s=rate * w.output,
            requests_per_s=rate,
            concurrency=held,
            tpot_ms=tpot * 1e3,
            ttft_ms=ttft * 1e3,
            step_ms=max(t_mem, t_cmp) * 1e3,
            step_bound="memory" if t_mem >= t_cmp else "compute",
            prefill_ms=r.t_prefill * 1e3,
            prefill_share=rate * r.t_prefill,
            weights_read_gb=model.decode_weight_bytes(precision, b) / 1e9,
            kv_read_gb=b * r.context * r.kv / 1e9,
            experts_touched=model.experts_touched(b),
            weights_gb=r.weights / 1e9,
            kv_gb=held * per_sequence / 1e9,
            usable_gb=r.usable / 1e9,
            batch_bound=failing(b * (1 + 1e-6)) or "batch",
            policy=name,
        ),
        None,
    )


def operating_point(
    model: ModelSpec, gpu: Gpu, n: int, precision: str, w: Workload, a: Assumptions
) -> tuple[OperatingPoint | None, Refusal | None]:
    """The replica of ``n`` GPUs at the better of two serving policies, each at its largest batch meeting
    TPOT, TTFT and memory (None: why not). Continuous batching wins for long answers; static batches, whose
    decode steps are never slowed by prefills, for answers of a token or two."""
    r = _replica(model, gpu, n, precision, w, a)
    if r.weights >= r.usable:
        return None, Refusal(
            n, "weights", f"weights {r.weights / 1e9:,.1f} GB do not fit {n} GPUs ({r.usable / 1e9:,.1f} GB usable)"
        )
    policies = [("static", _static(r, w))]
    if r.decode_steps >= 1:
        policies.insert(0, ("continuous", _continuous(r, w)))
    best: OperatingPoint | None = None
    refusal: Refusal | None = None
    for name, figures in policies:
        point, why = _serve(model, precision, r, w, name, figures, n)
        if point is not None and (best is None or point.tokens_per_s > best.tokens_per_s):
            best = point
        refusal = refusal or why
    return (best, None) if best is not None else (None, refusal)


@dataclass(frozen=True)
class GenerationNeed:
    gpu_model: str
    generation: str
    precision: str
    gpus_per_replica: int
    tokens_per_s_per_replica: float
    throughput_source: str
    replicas: int
    gpus: int
    nodes: int
    gpus_provisioned: int
    racks: int
    kw: float
    gpus_per_rack: int
    tokens_per_s_per_gpu: float
    prefill_min_gpus: int
    concurrency_per_replica: float
    requests_per_s_per_replica: float
    batch_per_replica: float | None = None
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    decode_step_ms: float | None = None
    prefill_ms: float | None = None
    prefill_share: float | None = None
    weights_read_gb: float | None = None
    kv_read_gb: float | None = None
    experts_touched: float | None = None
    weights_gb: float | None = None
    kv_gb: float | None = None
    usable_gb: float | None = None
    binding: dict[str, str] = field(default_factory=dict)
    steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class MonthPlan:
    month: date
    tokens_per_s: float
    requests_per_s: float
    prompt_tokens: int
    output_tokens: int
    tpot_ms_target: float
    ttft_ms_target: float
    prefill_flops_per_s: float
    needs: tuple[GenerationNeed, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class CapacityResult:
    model: ModelSpec
    precision: str
    kv_bytes_per_token: float
    weight_gb: float
    months: tuple[MonthPlan, ...]
    assumptions: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class Measured:
    """An operator's measured operating point for one GPU model."""

    gpus_per_replica: int
    tokens_per_s: float
    confirmed: bool = False


def _round(x: float, digits: int = 3) -> float:
    return round(x, digits)


def _gpus_for(gpu: Gpu, n: int, per_replica: float, demand: float) -> tuple[int, int, int, int, float]:
    replicas = math.ceil(demand / per_replica - 1e-9) if demand > 0 else 0
    nodes, provisioned, racks, kw = gpu.pack(replicas, n)
    return replicas, nodes, provisioned, racks, kw


def _workload(month: ForecastMonth, a: Assumptions) -> Workload:
    return Workload(
        month.prompt_tokens,
        max(1, month.output_tokens),
        (month.tpot_ms_target if month.tpot_ms_target is not None else a.tpot_ms) / 1e3,
        (month.ttft_ms_target if month.ttft_ms_target is not None else a.ttft_ms) / 1e3,
    )


@cache
def _best_points(
    model: ModelSpec, gpu_model: str, precision: str, w: Workload, a: Assumptions
) -> tuple[tuple[OperatingPoint, ...], tuple[Refusal, ...]]:
    """The operating points of the replica sizes within one NVLink domain, or, only when none of
    those can serve (weights or latency), of whole nodes or racks; and why the others cannot."""
    gpu = Gpu.of(gpu_model)
    points: list[OperatingPoint] = []
    reasons: list[Refusal] = []
    for within in (True, False):
        for n in gpu.replica_sizes():
            if (n <= gpu.nvlink_domain) != within:
                continue
            point, why = operating_point(model, gpu, n, precision, w, a)
            if point is None:
                assert why is not None
                reasons.append(why)
            else:
                points.append(point)
        if points:
            break
    return tuple(points), tuple(reasons)


def estimate(model: ModelSpec, gpu_model: str, precision: str, month: ForecastMonth, gpus: int) -> float | None:
    """This model's tokens/s for a replica of ``gpus`` GPUs (None: it cannot serve at that size)."""
    a = Assumptions.load()
    gpu = Gpu.of(gpu_model)
    if precision not in gpu.tflops:
        return None
    point, _ = operating_point(model, gpu, gpus, precision, _workload(month, a), a)
    return point.tokens_per_s if point else None


def measured_plausible(model: ModelSpec, gpu_model: str, precision: str, month: ForecastMonth, m: Measured) -> str:
    """'' when a measured point is within 0.1x-10x of this model's estimate, else why not."""
    est = estimate(model, gpu_model, precision, month, m.gpus_per_replica)
    if est is None:
        return (
            f"{model.name} at {precision} cannot serve {month.prompt_tokens:,}+{month.output_tokens:,}-token requests "
            f"on {m.gpus_per_replica} {gpu_model} GPUs by this model"
        )
    ratio = m.tokens_per_s / est
    lo, hi = PLAUSIBLE_RATIO
    if ratio < lo or ratio > hi:
        return (
            f"{m.tokens_per_s:,.1f} tokens/s per {m.gpus_per_replica}-GPU replica is {ratio:.3g}x this model's "
            f"estimate of {est:,.1f} for {month.month:%Y-%m} (outside {lo:g}x-{hi:g}x)"
        )
    return ""


def _sized(
    model: ModelSpec,
    gpu: Gpu,
    precision: str,
    month: ForecastMonth,
    w: Workload,
    n: int,
    per_replica: float,
    demand: float,
) -> dict:
    """What follows from a replica's size and tokens/s, whoever gave them: replicas packed into nodes or racks,
    GPUs, kW, tokens/s per GPU of a full packing unit, and the prefill minimum."""
    replicas, nodes, provisioned, racks, kw = _gpus_for(gpu, n, per_replica, demand)
    unit_replicas, unit_gpus = gpu.per_unit(n)
    prefill_min = (
        math.ceil(month.demand_requests_per_s * model.prefill_flops(w.prompt) / (gpu.tflops[precision] * 1e12) - 1e-9)
        if precision in gpu.tflops
        else 0
    )
    return {
        "gpu_model": gpu.gpu_model,
        "generation": gpu.generation,
        "precision": precision,
        "gpus_per_replica": n,
        "tokens_per_s_per_replica": _round(per_replica),
        "replicas": replicas,
        "gpus": replicas * n,
        "nodes": nodes,
        "gpus_provisioned": provisioned,
        "racks": racks,
        "kw": _round(kw),
        "gpus_per_rack": gpu.gpus_per_rack,
        "tokens_per_s_per_gpu": _round(per_replica * unit_replicas / unit_gpus),
        "prefill_min_gpus": prefill_min,
    }


def _fleet_text(gpu: Gpu, sized: dict) -> str:
    return (
        f"{sized['replicas']:,} replicas = {sized['gpus']:,} GPUs, {sized['nodes']:,} "
        f"{'trays' if gpu.rack_scale else 'nodes'}, {sized['racks']:,} racks, {sized['kw']:,.1f} kW"
    )


REPLICA_BOUND = {
    "weights": "weights: a smaller replica cannot hold them",
    "memory": "HBM: a smaller replica cannot hold the weights and one sequence",
    "tpot": "the TPOT target: a smaller replica cannot reach it",
    "ttft": "the TTFT target: a smaller replica cannot prefill in time",
}


def _need_from_point(
    model: ModelSpec,
    gpu: Gpu,
    precision: str,
    month: ForecastMonth,
    w: Workload,
    p: OperatingPoint,
    demand: float,
    refusals: tuple[Refusal, ...] = (),
    smaller_fits: bool = False,
) -> GenerationNeed:
    sized = _sized(model, gpu, precision, month, w, p.gpus, p.tokens_per_s, demand)
    requests = month.demand_requests_per_s
    prefill_min = sized["prefill_min_gpus"]
    mem_or_cmp = "HBM bandwidth" if p.step_bound == "memory" else "tensor compute"
    fleet = "prefill" if p.prefill_share >= 0.5 else "decode"
    binding = {
        "replica": (
            "fewest GPUs for the demand"
            if smaller_fits
            else next(
                (REPLICA_BOUND[r.kind] for r in sorted(refusals, key=lambda r: -r.gpus) if r.gpus < p.gpus),
                "fewest GPUs for the demand",
            )
        )
        + (" (spans nodes: pipeline-parallel over the scale-out fabric)" if p.gpus > gpu.nvlink_domain else ""),
        "policy": p.policy,
        "batch": p.batch_bound,
        "step": p.step_bound,
        "fleet": fleet,
    }
    moe = (
        f"; {p.experts_touched:,.1f} of {model.routed_experts} experts per layer touched at a batch of {p.batch:,.1f}"
        if model.moe
        else ""
    )
    steps = (
        f"prefill: {w.prompt:,} tokens x (2 x {model.active_params_b:g}B + attention) = "
        f"{model.prefill_flops(w.prompt) / 1e12:,.2f} TFLOP per request, {p.prefill_ms:,.1f} ms on {p.gpus} GPUs; "
        f"{requests:,.1f} requests/s need at least {prefill_min:,} GPUs at 100 % of dense {precision} peak",
        f"decode step at an average batch of {p.batch:,.1f} sequences: read {p.weights_read_gb:,.1f} GB of weights + {p.kv_read_gb:,.1f} GB of KV "
        f"cache{moe}; {p.step_ms:,.2f} ms, bound by {mem_or_cmp}",
        (
            f"{POLICY_TEXT['continuous']}: TPOT = step + batch x prefill / {w.output - 1:,} decode steps per request "
            f"= {p.tpot_ms:,.1f} ms (target {w.tpot_s * 1e3:,.0f}); TTFT ~ prefill + one step = {p.ttft_ms:,.0f} ms "
            f"(target {w.ttft_s * 1e3:,.0f})"
            if p.policy == "continuous"
            else f"{POLICY_TEXT['static']}: TPOT = step = {p.tpot_ms:,.1f} ms (target {w.tpot_s * 1e3:,.0f}); "
            f"TTFT at worst a cycle + the batch's prefill = {p.ttft_ms:,.0f} ms (target {w.ttft_s * 1e3:,.0f})"
        )
        + f"; the batch is bound by {BOUND_TEXT.get(p.batch_bound, p.batch_bound)}",
        f"Little's law: {p.requests_per_s:,.2f} requests/s x ({w.ttft_s:g} s TTFT + {w.output - 1:,} x "
        f"{p.tpot_ms / 1e3:.4f} s) = {p.concurrency:,.0f} sequences per replica; memory {p.weights_gb:,.1f} GB "
        f"weights + {p.kv_gb:,.1f} GB KV of {p.usable_gb:,.1f} GB usable"
        if p.policy == "continuous"
        else f"a static batch holds its {p.concurrency:,.0f} sequences; memory {p.weights_gb:,.1f} GB weights + "
        f"{p.kv_gb:,.1f} GB KV of {p.usable_gb:,.1f} GB usable",
        f"{p.tokens_per_s:,.0f} output tokens/s per replica of {p.gpus} GPUs; prefill takes "
        f"{p.prefill_share:.0%} of its time ({fleet}-bound); {_fleet_text(gpu, sized)}",
    )
    return GenerationNeed(
        **sized,
        throughput_source="first principles (prefill FLOPs, decode roofline, Little's law): see steps",
        concurrency_per_replica=_round(p.concurrency, 1),
        requests_per_s_per_replica=_round(p.requests_per_s),
        batch_per_replica=_round(p.batch, 2),
        tpot_ms=_round(p.tpot_ms),
        ttft_ms=_round(p.ttft_ms),
        decode_step_ms=_round(p.step_ms),
        prefill_ms=_round(p.prefill_ms),
        prefill_share=_round(p.prefill_share, 4),
        weights_read_gb=_round(p.weights_read_gb),
        kv_read_gb=_round(p.kv_read_gb),
        experts_touched=_round(p.experts_touched, 2) if model.moe else None,
        weights_gb=_round(p.weights_gb),
        kv_gb=_round(p.kv_gb),
        usable_gb=_round(p.usable_gb),
        binding=binding,
        steps=steps,
    )


def _need_from_measurement(
    model: ModelSpec, gpu: Gpu, precision: str, month: ForecastMonth, w: Workload, m: Measured, demand: float
) -> GenerationNeed:
    sized = _sized(model, gpu, precision, month, w, m.gpus_per_replica, m.tokens_per_s, demand)
    rate = m.tokens_per_s / w.output
    # Little's law at the targets: the measurement is taken to hold them.
    concurrency = rate * (w.ttft_s + (w.output - 1) * w.tpot_s)
    return GenerationNeed(
        **sized,
        throughput_source="operator measurement"
        + (" (confirmed outside 0.1x-10x of the model)" if m.confirmed else ""),
        concurrency_per_replica=_round(concurrency, 1),
        requests_per_s_per_replica=_round(rate),
        binding={"replica": "operator measurement", "batch": "operator measurement"},
        steps=(
            f"measured {m.tokens_per_s:,.1f} output tokens/s per replica of {m.gpus_per_replica} GPUs replaces the "
            f"model; Little's law at the targets: {rate:,.2f} requests/s x ({w.ttft_s:g} s TTFT + "
            f"{w.output - 1:,} x {w.tpot_s:g} s) = {concurrency:,.0f} sequences per replica",
            _fleet_text(gpu, sized),
        ),
    )


def default_gpu_models() -> tuple[str, ...]:
    return tuple(r.gpu_model for r in generations() if r.hbm_gb is not None and r.hbm_tb_s is not None)


def plan_capacity(
    model: ModelSpec,
    forecast: tuple[ForecastMonth, ...],
    gpu_models: tuple[str, ...] | None = None,
    measured: dict[str, Measured] | None = None,
    precision: str | None = None,
) -> CapacityResult:
    """Replicas, GPUs, racks and kW per month and generation; ``measured`` maps a GPU model to the
    operator's operating point, which replaces the model for it (check it with ``measured_plausible``)."""
    precision = precision or model.precision
    a = Assumptions.load()
    measured = measured or {}
    models = gpu_models or default_gpu_models()
    months = []
    for month in forecast:
        w = _workload(month, a)
        demand = month.demand_tokens_per_s
        needs, notes = [], []
        for gpu_model in models:
            gpu = Gpu.of(gpu_model)
            if gpu_model in measured:
                needs.append(_need_from_measurement(model, gpu, precision, month, w, measured[gpu_model], demand))
                continue
            if precision not in gpu.tflops:
                notes.append(f"{gpu_model}: no {precision} tensor cores (generations.csv); not planned at {precision}")
                continue
            points, refusals = _best_points(model, gpu_model, precision, w, a)
            if not points:
                notes.append(f"{gpu_model}: not planned: " + "; ".join(dict.fromkeys(r.text for r in refusals)))
                continue

            def cost(p: OperatingPoint, gpu: Gpu = gpu, demand: float = demand) -> tuple[int, int, int]:
                replicas, _, provisioned, _, _ = _gpus_for(gpu, p.gpus, p.tokens_per_s, demand)
                return provisioned, replicas * p.gpus, p.gpus

            best = min(points, key=cost)
            smaller = any(q.gpus < best.gpus for q in points)
            needs.append(_need_from_point(model, gpu, precision, month, w, best, demand, refusals, smaller))
        months.append(
            MonthPlan(
                month=month.month,
                tokens_per_s=_round(demand),
                requests_per_s=_round(month.demand_requests_per_s),
                prompt_tokens=w.prompt,
                output_tokens=w.output,
                tpot_ms_target=w.tpot_s * 1e3,
                ttft_ms_target=w.ttft_s * 1e3,
                prefill_flops_per_s=month.demand_requests_per_s * model.prefill_flops(w.prompt),
                needs=tuple(needs),
                notes=tuple(notes),
            )
        )
    return CapacityResult(
        model,
        precision,
        model.kv_bytes_per_token(precision),
        _round(model.weight_bytes(precision) / 1e9),
        tuple(months),
        assumptions(model, precision),
    )


def assumptions(model: ModelSpec, precision: str) -> tuple[tuple[str, str, str], ...]:
    rows = []
    for name in (
        "compute_efficiency",
        "memory_efficiency",
        "hbm_usable_fraction",
        "reference_tpot_ms",
        "reference_ttft_ms",
        "kv_cache_precision",
    ):
        row = parameter(name)
        used = f" (uses {row.low})" if row.low is not None and row.low != row.high else ""
        rows.append((name, f"{row.value} {row.unit}{used}", f"{row.file}: {row.source}"))
    rows.append(("precision", f"{precision}: {WEIGHT_BYTES[precision]:g} bytes per weight", "operator input"))
    rows.append(("model", model.name, model.source))
    rows.append(("GPU figures", "HBM GB and TB/s, dense TFLOPS per precision", "generations.csv (each row's source)"))
    return tuple(rows)


def gap_deliveries(
    result: CapacityResult, gpu_model: str, existing_gpus: int, racks_per_unit: int = 8, lead_weeks: int = 0
) -> list[dict]:
    """Migration-plan deliveries that keep ``gpu_model`` capacity at each month's need: whole scalable
    units of ``racks_per_unit`` racks, arriving ``lead_weeks`` before the month that needs them (so
    they are burnt in and in service when it starts)."""
    have_racks = 0
    deliveries = []
    for month in result.months:
        need = next((n for n in month.needs if n.gpu_model == gpu_model), None)
        if need is None:
            continue
        existing_racks = existing_gpus // need.gpus_per_rack
        racks = max(0, need.racks - existing_racks)
        if racks > have_racks:
            units = math.ceil((racks - have_racks) / racks_per_unit)
            deliveries.append(
                {
                    "date": (month.month - timedelta(weeks=lead_weeks)).isoformat(),
                    "scalable_units": units,
                    "racks_per_unit": racks_per_unit,
                    "label": f"capacity {month.month:%Y-%m}",
                }
            )
            have_racks += units * racks_per_unit
    return deliveries
