"""The bring-up ladder: a new node climbs its stack one layer at a time before burn-in.

Bring-up is a dependency chain (firmware, OS and kernel, GPU driver, fabric manager, network
stack, GPUDirect RDMA, CUDA and NCCL, container runtime) and a layer skipped shows up as a
symptom in another one: on Blackwell HGX the fabric manager reaches the NVSwitches through a
bridge device and so needs the InfiniBand stack. Each step therefore checks the node's
reported inventory (fleet.models.NodeSoftware) for its own components *and* the components of
other layers it depends on, and a failure names the layer and the missing dependency.

A check that fails is retried (the agent re-reports its stack every health-report interval;
an operator or the image pipeline fixes the layer meanwhile) up to `MAX_ATTEMPTS` times with
backoff, then the node goes to `bring_up_failed` with the reason. A step whose components the
agent has not reported yet waits, up to the step's time limit. Every pass, fail and wait
past the limit is a node event.

The loop (`advance_bring_up`) is level-triggered and idempotent: it reads where each
`bringing_up` node stands and what its inventory says now; under an advisory lock, batches
claimed with SKIP LOCKED, one transaction per batch.
"""

import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from core.context import current_request_id
from core.locks import locked_run
from core.reference_data import parameter
from fleet.choices import AgentAction, ComponentState
from fleet.choices import Lifecycle as L
from fleet.models import Node, NodeBringUp, NodeEvent, NodeSoftware, NodeType

from .agent_work import request_agent_actions
from .lifecycle import transition_many

ACTOR = "system:bring_up"
BATCH_SIZE = 500
TIME_BUDGET_S = 20.0
MAX_ATTEMPTS = 3
RETRY_BASE = timedelta(minutes=1)  # 1, 2, 4 min: the agent re-reports its stack every minute or so
DONE = "done"


def _firmware_limit() -> tuple[timedelta, str]:
    """facility.csv `firmware_zap_stage`: the stage takes 1-2 h and fails past 6 h (the row's source)."""
    row = parameter("firmware_zap_stage")
    match = re.search(r"fail if > (\d+) h", row.source)
    assert match and row.unit == "hours", "facility.csv firmware_zap_stage must say when the stage fails"
    return timedelta(hours=int(match[1])), f"facility.csv firmware_zap_stage: {row.value} {row.unit}, {row.source}"


FIRMWARE_LIMIT, FIRMWARE_LIMIT_SOURCE = _firmware_limit()
# No sourced figure exists for the software layers; each is a package install and a service or
# module start (minutes), so one hour is generous and stated as an assumption.
LAYER_LIMIT = timedelta(hours=1)
LAYER_LIMIT_SOURCE = "assumed: an install and a service start take minutes; no sourced figure"

COMPONENT_LABELS = {
    "gpu_vbios": "GPU VBIOS",
    "kernel": "kernel",
    "gpu_driver": "GPU driver",
    "fabric_manager": "NVIDIA fabric manager",
    "ib_stack": "InfiniBand stack (MLNX_OFED/DOCA)",
    "nvidia_peermem": "nvidia-peermem (GPUDirect RDMA)",
    "cuda": "CUDA",
    "nccl": "NCCL",
    "container_toolkit": "NVIDIA container toolkit",
}


def _always(node_type: NodeType) -> bool:
    return True


def has_nvswitch(node_type: NodeType) -> bool:
    """HGX boards: the GPUs of one node share NVSwitches that the fabric manager configures.
    Rack-scale NVL72 trays have their NVLink switches in switch trays managed outside the node."""
    return not node_type.is_rack_scale and node_type.nvlink_domain_gpus > 1


def is_blackwell_hgx(node_type: NodeType) -> bool:
    return has_nvswitch(node_type) and node_type.generation in ("blackwell", "blackwell-ultra")


@dataclass(frozen=True)
class Step:
    name: str
    layer: str
    components: tuple[str, ...]
    time_limit: timedelta
    limit_source: str
    # components of other layers this one cannot work without, with why (for the failure)
    needs: tuple[tuple[str, str], ...] = ()
    applies: Callable[[NodeType], bool] = _always
    extra_needs: Callable[[NodeType], tuple[tuple[str, str], ...]] = lambda node_type: ()


def _fabric_manager_needs(node_type: NodeType) -> tuple[tuple[str, str], ...]:
    if is_blackwell_hgx(node_type):
        return (("ib_stack", "on Blackwell HGX it reaches the NVSwitches through a bridge device"),)
    return ()


LADDER: tuple[Step, ...] = (
    Step("firmware", "firmware", ("gpu_vbios",), FIRMWARE_LIMIT, FIRMWARE_LIMIT_SOURCE),
    Step("os_kernel", "OS and kernel", ("kernel",), LAYER_LIMIT, LAYER_LIMIT_SOURCE),
    Step(
        "driver", "GPU driver", ("gpu_driver",), LAYER_LIMIT, LAYER_LIMIT_SOURCE, needs=(("kernel", "it is a module"),)
    ),
    Step(
        "fabric_manager",
        "fabric manager",
        ("fabric_manager",),
        LAYER_LIMIT,
        LAYER_LIMIT_SOURCE,
        needs=(("gpu_driver", "it must match the driver"),),
        applies=has_nvswitch,
        extra_needs=_fabric_manager_needs,
    ),
    Step("network_stack", "network stack", ("ib_stack",), LAYER_LIMIT, LAYER_LIMIT_SOURCE),
    Step(
        "gpudirect",
        "GPUDirect RDMA",
        ("nvidia_peermem",),
        LAYER_LIMIT,
        LAYER_LIMIT_SOURCE,
        needs=(("gpu_driver", "it bridges the driver"), ("ib_stack", "to the RDMA stack")),
    ),
    Step(
        "cuda_nccl",
        "CUDA and NCCL",
        ("cuda", "nccl"),
        LAYER_LIMIT,
        LAYER_LIMIT_SOURCE,
        needs=(("gpu_driver", "CUDA runs on the driver"),),
    ),
    Step(
        "container_runtime",
        "container runtime",
        ("container_toolkit",),
        LAYER_LIMIT,
        LAYER_LIMIT_SOURCE,
        needs=(("gpu_driver", "it mounts the driver into containers"),),
    ),
)
STEPS_BY_NAME = {s.name: s for s in LADDER}


def steps_for(node_type: NodeType) -> list[Step]:
    return [s for s in LADDER if s.applies(node_type)]


@dataclass(frozen=True)
class Verdict:
    outcome: str  # "pass", "fail" or "wait"
    reason: str


def _label(component: str) -> str:
    return COMPONENT_LABELS.get(component, component)


def check_step(step: Step, node_type: NodeType, stack: dict[str, NodeSoftware]) -> Verdict:
    """Judge one step from the node's inventory (`stack`: component → its best-state row)."""
    for component, why in (*step.needs, *step.extra_needs(node_type)):
        row = stack.get(component)
        if row is None or row.state != ComponentState.OK:
            state = "not installed" if row is None or row.state == ComponentState.MISSING else row.get_state_display()
            return Verdict(
                "fail",
                f"{step.layer}: needs the {_label(component)} ({why}), which is {state.lower()}.",
            )
    for component in step.components:
        row = stack.get(component)
        if row is None:
            return Verdict("wait", f"{step.layer}: waiting for the agent to report the {_label(component)}.")
        if row.state != ComponentState.OK:
            detail = f" ({row.detail})" if row.detail else ""
            return Verdict(
                "fail", f"{step.layer}: the {_label(component)} is {row.get_state_display().lower()}{detail}."
            )
    versions = ", ".join(f"{_label(c)} {stack[c].version or '(no version)'}" for c in step.components)
    return Verdict("pass", f"{step.layer} verified: {versions}.")


_STATE_RANK = {ComponentState.OK: 0, ComponentState.INACTIVE: 1, ComponentState.FAILED: 2, ComponentState.MISSING: 3}


def stacks_of(node_ids) -> dict:
    """node id → {component: row}, one query; where two sources report a component, the one in
    the best state counts (a BMC that cannot see a host service does not hide the agent's)."""
    stacks: dict = defaultdict(dict)
    for row in NodeSoftware.objects.filter(node_id__in=list(node_ids)):
        current = stacks[row.node_id].get(row.component)
        if current is None or _STATE_RANK[row.state] < _STATE_RANK[current.state]:
            stacks[row.node_id][row.component] = row
    return stacks


def start_ladder(node: Node, now: datetime) -> NodeBringUp:
    """(Re)start the node at the bottom of its ladder: on entering `bringing_up` and on retry."""
    first = steps_for(node.node_type)[0]
    row, _ = NodeBringUp.objects.update_or_create(
        node=node,
        defaults={"step": first.name, "step_started_at": now, "attempts": 0, "next_check_at": None, "last_result": ""},
    )
    return row


@dataclass
class BringUpPass:
    claimed: int = 0
    passed_steps: int = 0
    failed_checks: int = 0
    to_burn_in: int = 0
    failed: int = 0
    complete: bool = True
    skipped: bool = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _event(node: Node, now: datetime, action: str, reason: str, request_id: str) -> NodeEvent:
    return NodeEvent(
        node_id=node.pk,
        at=now,
        actor=ACTOR,
        action=action,
        from_state=node.lifecycle,
        to_state=node.lifecycle,
        reason=reason[:2000],
        request_id=request_id,
    )


def _advance_one(node: Node, row: NodeBringUp, stack: dict, now: datetime, result: BringUpPass, out: dict) -> None:
    """Climb as far as the inventory allows now; record what happened in `out` for the batch."""
    ladder = steps_for(node.node_type)
    names = [s.name for s in ladder]
    if row.step not in names:  # the ladder changed under a node: start again from the bottom
        row.step, row.step_started_at, row.attempts = names[0], now, 0
    while True:
        step = STEPS_BY_NAME[row.step]
        verdict = check_step(step, node.node_type, stack)
        if verdict.outcome == "pass":
            result.passed_steps += 1
            out["events"].append(_event(node, now, f"bring_up.{step.name}", verdict.reason, out["request_id"]))
            index = names.index(step.name)
            if index + 1 == len(names):
                row.step, row.last_result, row.next_check_at = DONE, verdict.reason, None
                out["to_burn_in"].append(node)
                return
            row.step, row.step_started_at, row.attempts, row.next_check_at = names[index + 1], now, 0, None
            row.last_result = verdict.reason
            continue
        overdue = now >= row.step_started_at + step.time_limit
        if verdict.outcome == "wait":
            if overdue:
                limit = int(step.time_limit.total_seconds() // 3600)
                reason = f"{verdict.reason.removesuffix('.')}: not ready within {limit} h ({step.limit_source})."
                out["failed"].append((node, f"bring-up held at {step.name}: {reason}"))
            row.last_result = verdict.reason
            return
        row.attempts += 1
        result.failed_checks += 1
        row.last_result = verdict.reason
        out["events"].append(
            _event(
                node,
                now,
                f"bring_up.{step.name}",
                f"check failed ({row.attempts} of {MAX_ATTEMPTS}): {verdict.reason}",
                out["request_id"],
            )
        )
        if row.attempts >= MAX_ATTEMPTS or overdue:
            out["failed"].append((node, f"bring-up failed at {step.name}: {verdict.reason}"))
        else:
            row.next_check_at = now + RETRY_BASE * 2 ** (row.attempts - 1)
        return


def _claim(after_id, now: datetime, batch_size: int) -> list[Node]:
    qs = Node.objects.filter(lifecycle=L.BRINGING_UP).select_related("node_type").order_by("pk")
    if after_id is not None:
        qs = qs.filter(pk__gt=after_id)
    if connection.features.has_select_for_update_skip_locked:
        qs = qs.select_for_update(skip_locked=True, of=("self",))
    return list(qs[:batch_size])


def _advance_batch(nodes: list[Node], now: datetime, result: BringUpPass) -> None:
    rows = {r.node_id: r for r in NodeBringUp.objects.filter(node_id__in=[n.pk for n in nodes])}
    due = [n for n in nodes if n.pk not in rows or rows[n.pk].next_check_at is None or rows[n.pk].next_check_at <= now]
    stacks = stacks_of(n.pk for n in due)
    out = {"events": [], "to_burn_in": [], "failed": [], "request_id": current_request_id()}
    created, changed = [], []
    for node in due:
        row = rows.get(node.pk)
        if row is None:  # moved here by something other than the operator action: start at the bottom
            first = steps_for(node.node_type)[0]
            row = NodeBringUp(node=node, step=first.name, step_started_at=now)
            created.append(row)
        else:
            changed.append(row)
        _advance_one(node, row, stacks.get(node.pk, {}), now, result, out)
    NodeBringUp.objects.bulk_create(created)
    NodeBringUp.objects.bulk_update(changed, ["step", "step_started_at", "attempts", "next_check_at", "last_result"])
    NodeEvent.objects.bulk_create(out["events"])
    if out["to_burn_in"]:
        moved = transition_many(
            out["to_burn_in"], L.BURN_IN, actor=ACTOR, action="bring_up", reason="every bring-up step verified"
        )
        ids = {c.node_id for c in moved}
        request_agent_actions(
            nodes=[n for n in out["to_burn_in"] if n.pk in ids],
            action=AgentAction.BURN_IN,
            actor=ACTOR,
            reason="bring-up verified every layer",
        )
        result.to_burn_in += len(moved)
    for node, error in out["failed"]:
        result.failed += len(
            transition_many([node], L.BRING_UP_FAILED, actor=ACTOR, action="bring_up", reason=error, last_error=error)
        )
    result.claimed += len(nodes)


def bring_up_pass(*, batch_size: int = BATCH_SIZE, time_budget_s: float = TIME_BUDGET_S, now=None) -> BringUpPass:
    started = time.monotonic()
    result = BringUpPass()
    last_id = None
    while True:
        if time.monotonic() - started > time_budget_s:
            result.complete = False
            break
        with transaction.atomic():
            batch_now = now or timezone.now()
            nodes = _claim(last_id, batch_now, batch_size)
            if not nodes:
                break
            _advance_batch(nodes, batch_now, result)
        last_id = nodes[-1].pk
        if len(nodes) < batch_size:
            break
    return result


def advance_bring_up(**kwargs) -> BringUpPass:
    """The loop's entry point (Celery beat, `run_loops`): one pass under the advisory lock."""
    with locked_run("advance_bring_up") as acquired:
        if not acquired:
            return BringUpPass(skipped=True, complete=False)
        return bring_up_pass(**kwargs)
