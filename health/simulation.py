"""A month of Xids at the Llama 3 rates, judged by the policy before and after the catalogue
rules: false pulls and GPUs left in service that needed a reset, per 1,000 node-days.

The oracle is the catalogue's own word on each generated fault, fixed when the fault is drawn
(`Fault.truth`: the bucket of the Xid's row, or the action Xid 154 reported), not the policy's
decision: a pull whose every Xid NVIDIA calls RESTART_APP or IGNORE (or 154 None) is a false
pull; a fault NVIDIA says needs a reset or reboot, on a node that still takes new work, is a
GPU left in service.

What is drawn (docs/health-policy.md, "A month at the Llama 3 rates"):
- arrivals: `interruptions_per_node_day` (reliability.csv, derived from the Llama 3 paper) per
  node-day, Poisson;
- causes: the Llama 3 paper's unexpected-interruption mix (reliability.csv `llama3_cause_*`);
  the causes that raise no Xid (network, host maintenance, NIC, silent data corruption) are
  drawn and counted but judged by other rules, so they are left out of both figures;
- the Xids of each cause: the split below is ASSUMED (no published figure splits a cause into
  Xids); every Xid named is a catalogue row for H100.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from random import Random

from core.reference_data import parameter

from . import xid
from .choices import Severity as S

# cause → [(weight, [events])]; an event is (xid, fields). ASSUMED splits (see module doc).
CAUSE_XIDS: dict[str, list[tuple[float, list[tuple[int, dict]]]]] = {
    "software": [
        (0.35, [(13, {})]),
        (0.30, [(31, {})]),
        (0.10, [(43, {})]),
        (0.10, [(69, {})]),
        (0.05, [(8, {})]),
        (0.05, [(45, {}), (43, {})]),
        (0.05, [(137, {})]),
    ],
    "gpu": [
        (0.25, [(79, {})]),
        (0.15, [(62, {}), (154, {"recovery_action": 1})]),
        (0.15, [(109, {}), (154, {"recovery_action": 1})]),
        (0.10, [(46, {})]),
        (0.10, [(143, {}), (154, {"recovery_action": 1})]),
        (0.10, [(158, {}), (154, {"recovery_action": 1})]),
        (0.10, [(74, {"registers": [0] * 7}), (154, {"recovery_action": 1})]),
        (0.05, [(156, {}), (154, {"recovery_action": 1})]),
    ],
    "hbm3": [
        (0.50, [(94, {}), (154, {"recovery_action": 0})]),  # contained: restart the app, reset when convenient
        (0.25, [(48, {}), (63, {}), (154, {"recovery_action": 4})]),
        (0.15, [(95, {}), (154, {"recovery_action": 1})]),
        (0.10, [(64, {}), (154, {"recovery_action": 1})]),
    ],
    "sram": [
        (0.50, [(94, {}), (154, {"recovery_action": 0})]),
        (0.30, [(48, {}), (154, {"recovery_action": 1})]),
        (0.20, [(140, {})]),
    ],
    "gpu_system_processor": [
        (0.4, [(119, {})]),
        (0.4, [(120, {}), (154, {"recovery_action": 1})]),
        (0.2, [(110, {}), (154, {"recovery_action": 1})]),
    ],
    "gpu_thermal": [(1.0, [(54, {})])],
}
NO_XID_CAUSES = ("network_switch_cable", "host_maintenance", "nic", "silent_data_corruption")

# The policy before this change (health/policy.py up to commit 001d778^): 27 Xids by hand,
# everything else info; 48 with 63/64 fatal. Kept here only to measure what changed.
BEFORE: dict[int, str] = {
    **dict.fromkeys((13, 31, 43, 45, 63), S.INFO),
    **dict.fromkeys((92, 94), S.WARN),
    **dict.fromkeys((46, 48, 62, 95, 109, 119, 120, 136, 140, *range(144, 151)), S.RESET),
    **dict.fromkeys((79, 74, 154), S.REBOOT),
    64: S.FATAL,
}
BEFORE_RECOVERY = {1: S.RESET, 2: S.REBOOT, 3: S.RESET, 4: S.RESET}  # the NVML field, read with 154

HARMLESS = ("RESTART_APP", "IGNORE", "XID_154 None")
NEEDS_RESET = (
    "RESET_GPU",
    "RESTART_BM",
    "XID_154 GPU Reset Required",
    "XID_154 Drain and Reset",
    "XID_154 Node Reboot Required",
    "WORKFLOW_XID_48",
    "WORKFLOW_NVLINK_ERR",
)


@dataclass(frozen=True)
class Fault:
    day: float
    node: int
    gpu: int
    cause: str
    events: tuple[tuple[int, dict], ...]

    @property
    def truths(self) -> tuple[str, ...]:
        """NVIDIA's word on each Xid, read off the catalogue row (154: the action it reports)."""
        rows = xid.catalog()
        out = []
        for number, fields in self.events:
            bucket = rows[number].immediate_action
            if bucket == "XID_154":
                bucket = f"XID_154 {xid.RECOVERY_ACTION_NAMES[fields['recovery_action']]}"
            elif bucket == "WORKFLOW_XID_45":
                bucket = "IGNORE"  # never alone in what is drawn: "follow the other Xid"
            out.append(bucket)
        return tuple(out)

    @property
    def harmless(self) -> bool:
        return all(t in HARMLESS for t in self.truths)

    @property
    def needs_reset(self) -> bool:
        return any(t in NEEDS_RESET for t in self.truths)


# Share of nodes on a driver branch that emits Xid 154 with its companions (R565 and later);
# the rest run an older branch and send the companion Xid alone. ASSUMED: half the fleet.
DRIVER_154_SHARE = 0.5


def draw_month(
    *, seed: int, nodes: int = 1000, days: int = 30, gpus_per_node: int = 8, driver_154_share: float = DRIVER_154_SHARE
) -> list[Fault]:
    rng = Random(seed)
    emits_154 = [rng.random() < driver_154_share for _ in range(nodes)]
    rate = float(parameter("interruptions_per_node_day").low)
    mix = {
        name.removeprefix("llama3_cause_"): float(parameter(name).low)
        for name in (
            "llama3_cause_gpu",
            "llama3_cause_hbm3",
            "llama3_cause_software",
            "llama3_cause_network_switch_cable",
            "llama3_cause_host_maintenance",
            "llama3_cause_sram",
            "llama3_cause_gpu_system_processor",
            "llama3_cause_nic",
            "llama3_cause_silent_data_corruption",
            "llama3_cause_gpu_thermal",
        )
    }
    causes, weights = list(mix), list(mix.values())
    faults, t, horizon = [], 0.0, float(days)
    while True:
        t += rng.expovariate(rate * nodes)
        if t >= horizon:
            return faults
        cause = rng.choices(causes, weights)[0]
        node, gpu = rng.randrange(nodes), rng.randrange(gpus_per_node)
        if cause in NO_XID_CAUSES:
            faults.append(Fault(t, node, gpu, cause, ()))
            continue
        options = CAUSE_XIDS[cause]
        events = rng.choices([o[1] for o in options], [o[0] for o in options])[0]
        if not emits_154[node]:
            events = [e for e in events if e[0] != 154]
        faults.append(Fault(t, node, gpu, cause, tuple(events)))


def before(fault: Fault) -> str:
    """The old policy's worst severity for one heartbeat's Xids."""
    sev = []
    numbers = {n for n, _ in fault.events}
    for number, fields in fault.events:
        sev.append(BEFORE.get(number, S.INFO))
        if number == 154 and fields.get("recovery_action") in BEFORE_RECOVERY:
            sev.append(BEFORE_RECOVERY[fields["recovery_action"]])
    if 48 in numbers and numbers & {63, 64}:
        sev.append(S.FATAL)
    return xid.worst(sev)


def after(fault: Fault) -> str:
    """This policy: the catalogue decode, then the sweep's decision for a tenanted node."""
    from health.services.sweep import decide

    decisions = xid.decide_gpu(dict(fault.events), gpu_family="h100")
    rows = [{"node_id": fault.node, "signal": f"xid_{n}", "severity": d.severity} for n, d in decisions.items()]
    for number, fields in fault.events:
        if number == 154 and fields.get("recovery_action"):
            value = fields["recovery_action"]
            rows.append(
                {"node_id": fault.node, "signal": "recovery", "severity": xid.RECOVERY_ACTION_BUCKET[value].severity}
            )
    pulled = decide(rows, repeats=set(), tenanted={fault.node}).get(fault.node)
    return pulled[0] if pulled else xid.worst(r["severity"] for r in rows)


PULLS = {S.RESET, S.REBOOT, S.REPAIR, S.FATAL}
KEEPS_FROM_NEW_WORK = PULLS | {S.HOLD, S.DEFER}


@dataclass
class Figures:
    node_days: float
    faults: int = 0
    xid_faults: int = 0
    counts: dict = field(default_factory=dict)

    def per_1000(self, key: str) -> float:
        return 1000 * self.counts.get(key, 0) / self.node_days


def judge(faults: list[Fault], *, node_days: float) -> Figures:
    figures = Figures(node_days=node_days, faults=len(faults))
    counts = figures.counts
    for fault in faults:
        if not fault.events:
            continue
        figures.xid_faults += 1
        for label, severity in (("before", before(fault)), ("after", after(fault))):
            pulled = severity in PULLS
            if pulled:
                counts[f"{label}_pulls"] = counts.get(f"{label}_pulls", 0) + 1
            if pulled and fault.harmless:
                counts[f"{label}_false_pulls"] = counts.get(f"{label}_false_pulls", 0) + 1
            if fault.needs_reset and severity not in KEEPS_FROM_NEW_WORK:
                counts[f"{label}_left_needing_reset"] = counts.get(f"{label}_left_needing_reset", 0) + 1
            if severity == S.HOLD:
                counts[f"{label}_operator_tasks"] = counts.get(f"{label}_operator_tasks", 0) + 1
            if severity == S.DEFER:
                counts[f"{label}_deferred_resets"] = counts.get(f"{label}_deferred_resets", 0) + 1
    return figures


def month(*, seed: int, nodes: int = 10_000, days: int = 30) -> Figures:
    return judge(draw_month(seed=seed, nodes=nodes, days=days), node_days=float(nodes * days))
