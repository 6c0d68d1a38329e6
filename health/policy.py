"""The health policy as data, in one place (DESIGN.md, "Health policy").

Every signal the agent can raise maps to a severity; the severity decides the action chain.
The sweep, the heartbeat ingest and the console page `/health/policy/` all read these tables;
nothing else hard-codes a signal's meaning.
"""
from dataclasses import dataclass
from datetime import timedelta

from core.reference_data import parameter

from .choices import SEVERITY_RANK
from .choices import Severity as S

# heartbeat_defaults (reliability.csv, Kubernetes node lifecycle defaults): 10 s beat,
# unknown after 40 s, quarantine after 300 s.
HEARTBEAT_SOURCE = parameter("heartbeat_defaults")
HEARTBEAT_UNKNOWN_AFTER = timedelta(seconds=40)
HEARTBEAT_LOST_AFTER = timedelta(seconds=300)

THERMAL_THROTTLE_C = 87  # H100 SXM slowdown threshold reported by nvidia-smi (~87 C)
REPEAT_WINDOW = timedelta(days=7)  # same fault twice in 7 days → fatal
FLAP_WINDOW = timedelta(days=7)  # failed validation twice in 7 days → not accepted a third time
FLAP_FAILURES = 2
RMA_WINDOW = timedelta(days=30)  # third triage in 30 days → RMA
RMA_TRIAGES = 3
EVENT_EXPIRY = timedelta(hours=24)  # an info/warn event signal that does not recur clears after this
HISTORY_RETENTION = timedelta(days=30)  # ConditionEvent rows older than this are pruned by the sweep

ACTIONS: dict[str, str] = {
    S.INFO: "record",
    S.WARN: "mark degraded (placed last)",
    S.RESET: "quarantine → drain → GPU reset → DCGM r2 + NCCL + IB → validate",
    S.REBOOT: "quarantine → drain → power cycle → DCGM r3 + NCCL + IB → validate",
    S.FATAL: "quarantine → triage → repair or RMA; tenant credited; capacity backfilled",
}


@dataclass(frozen=True)
class Rule:
    signal: str
    severity: str
    description: str
    event: bool = False  # an occurrence (XID), not a level the heartbeat re-reports


XID_SEVERITY: dict[int, str] = {
    **{x: S.INFO for x in (13, 31, 43, 45, 63, 92)},
    94: S.WARN,
    **{x: S.RESET for x in (46, 48, 62, 95, 109, 119, 120, 136, 140)},
    79: S.REBOOT, 74: S.REBOOT,
    64: S.FATAL,
}
XID_DESCRIPTIONS = {
    13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    45: "preemptive cleanup", 63: "ECC page retirement / row remap event", 92: "high single-bit ECC rate",
    94: "contained ECC error", 46: "GPU stopped processing (timeout)", 48: "double-bit ECC error",
    62: "internal micro-controller halt", 95: "uncontained ECC error", 109: "context switch timeout",
    119: "GSP RPC timeout", 120: "GSP error", 136: "link training failure", 140: "unrecovered ECC error",
    79: "GPU has fallen off the bus", 74: "NVLink error", 64: "ECC page retirement / row remap failure",
}
UNLISTED_XID_SEVERITY = S.INFO  # recorded so an operator sees it; no automatic action

RULES: dict[str, Rule] = {
    **{f"xid_{x}": Rule(f"xid_{x}", sev, f"XID {x}: {XID_DESCRIPTIONS[x]}", event=True)
       for x, sev in XID_SEVERITY.items()},
    "ecc_sbe": Rule("ecc_sbe", S.INFO, "single-bit ECC errors corrected"),
    "row_remap_pending": Rule("row_remap_pending", S.WARN, "row remap pending (needs a GPU reset)"),
    "row_remap_failed": Rule("row_remap_failed", S.FATAL, "row remap failed (no spare rows)"),
    "thermal_throttle": Rule("thermal_throttle", S.WARN, f"temperature ≥ {THERMAL_THROTTLE_C} °C (thermal throttle)"),
    "nvlink_down": Rule("nvlink_down", S.REBOOT, "NVLink link(s) down"),
    "gpu_count_mismatch": Rule("gpu_count_mismatch", S.REBOOT, "heartbeat reports fewer GPUs than the node type"),
    "ib_link": Rule("ib_link", S.REBOOT, "InfiniBand port down (ib_link check failed)"),
    "ib_symbol_errors": Rule("ib_symbol_errors", S.WARN, "InfiniBand symbol errors (ib_link check warned)"),
    "nvme_smart": Rule("nvme_smart", S.WARN, "NVMe SMART warning"),
    "heartbeat_lost": Rule("heartbeat_lost", S.REBOOT, "no heartbeat for 300 s"),
    "dcgm_r1": Rule("dcgm_r1", S.RESET, "DCGM level 1 failed"),
    "dcgm_r2": Rule("dcgm_r2", S.REBOOT, "DCGM level 2 failed"),
    "dcgm_r3": Rule("dcgm_r3", S.FATAL, "DCGM level 3 failed"),
    "nccl_allreduce": Rule("nccl_allreduce", S.RESET, "NCCL all-reduce below expected bandwidth or failed"),
    "burn_in": Rule("burn_in", S.FATAL, "burn-in failed"),
}

# Escalations the sweep applies on top of single signals (need history or combinations).
ESCALATIONS: tuple[tuple[str, str, str], ...] = (
    ("xid_48 with xid_63/xid_64 repeating", S.FATAL, "double-bit ECC with repeated page retirement"),
    ("same fault twice in 7 days", S.FATAL, "a reset/reboot-class signal raised again within 7 days"),
    ("failed validation twice in 7 days", "triage", "not accepted on a third pass (flapping)"),
    ("third triage in 30 days", "rma", "sent for RMA"),
)

# A failing health-report check raises the condition named here; a warning raises the second.
CHECK_FAIL_SIGNAL = {name: name for name in ("dcgm_r1", "dcgm_r2", "dcgm_r3", "nccl_allreduce", "ib_link",
                                               "nvme_smart", "burn_in")}
CHECK_WARN_SIGNAL = {"ib_link": "ib_symbol_errors", "nvme_smart": "nvme_smart"}
# A passing check clears these conditions.
CHECK_PASS_CLEARS = {name: [name] + ([CHECK_WARN_SIGNAL[name]] if name in CHECK_WARN_SIGNAL else [])
                     for name in CHECK_FAIL_SIGNAL}

# Level signals the heartbeat reports every time: absent from a heartbeat → cleared.
HEARTBEAT_LEVEL_SIGNALS = frozenset({"ecc_sbe", "row_remap_pending", "thermal_throttle", "nvlink_down",
                                     "gpu_count_mismatch", "heartbeat_lost"})

# The validation gate (health.services.gate).
GATE_AFTER_RESET = ("dcgm_r2", "nccl_allreduce", "ib_link")
GATE_AFTER_REBOOT = ("dcgm_r3", "nccl_allreduce", "ib_link")
GATE_BURN_IN = ("dcgm_r3", "nccl_allreduce", "burn_in")


def severity_for(signal: str) -> str:
    rule = RULES.get(signal)
    return rule.severity if rule else UNLISTED_XID_SEVERITY


def is_event(signal: str) -> bool:
    rule = RULES.get(signal)
    return rule.event if rule else signal.startswith("xid_")


def policy_rows() -> list[dict]:
    """The table the console shows: one row per signal, most severe first."""

    rows = [{"signal": r.signal, "severity": r.severity, "description": r.description, "action": ACTIONS[r.severity]}
            for r in RULES.values()]
    return sorted(rows, key=lambda r: (-SEVERITY_RANK[r["severity"]], r["signal"]))
