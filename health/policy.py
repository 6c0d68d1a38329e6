"""The health policy as data, in one place (docs/design, "Health policy").

Every signal the agent can raise maps to a severity; the severity decides the action chain.
The sweep, the heartbeat ingest and the console page `/health/policy/` all read these tables;
nothing else hard-codes a signal's meaning. Every rule names its source; where the number is
this product's own choice (no vendor figure exists) the source says so.
"""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings

from core.reference_data import parameter

from . import xid
from .choices import SEVERITY_RANK
from .choices import Severity as S

# ---- sources ----------------------------------------------------------------------------------
XID_CATALOG = "NVIDIA XID catalog (docs.nvidia.com/deploy/xid-errors), resolution bucket"
NVML_RECOVERY = (
    "NVML nvmlDeviceGpuRecoveryAction_t via field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; NVIDIA GPU "
    "memory error management, 'Recovery action flag'"
)
NVML_THROTTLE = "NVML nvmlDeviceGetCurrentClocksEventReasons (HW/SW thermal slowdown bits 0x40, 0x20)"
DCGM_LEVELS = parameter("dcgm_diag_levels")  # reliability.csv
DCGM_SOURCE = f"{DCGM_LEVELS.source} ({DCGM_LEVELS.value})"
BURN_IN_SOURCE = parameter("burn_in_per_rack")
NVIDIA_ROW_REMAP = "NVIDIA GPU memory error management (row remapping; RMA policy thresholds)"
IB_SOURCE = (
    "InfiniBand PortInfo/PortCounters (LinkDownedCounter, SymbolErrorCounter); a port that is down or "
    "flaps is a cable or transceiver fault (NVIDIA cable validation guidance)"
)
OWN_CHOICE = "Hangar operating choice (no vendor figure); tune in health/policy.py"

# heartbeat_defaults (reliability.csv, Kubernetes node lifecycle defaults): 10 s beat,
# unknown after 40 s, quarantine after 300 s.
HEARTBEAT_SOURCE = parameter("heartbeat_defaults")
HEARTBEAT_UNKNOWN_AFTER = timedelta(seconds=40)
HEARTBEAT_LOST_AFTER = timedelta(seconds=300)
SWEEP_INTERVAL = timedelta(seconds=30)
# Server time decides: a health report stamped more than this far from its receipt is refused
# (kept, marked clock_skew); the gate compares receipt times, never the agent's stamp.
AGENT_CLOCK_SKEW_LIMIT = timedelta(minutes=5)  # core.periodic "health sweep"

# Correlated lapses (health.services.lapses). A site is "disrupted" the way the Kubernetes node
# lifecycle controller judges a zone (node_lifecycle_zone_disruption, reliability.csv): more than
# 2 nodes and at least 55 % of the reporting ones silent → no per-node judgement there.
ZONE_SOURCE = parameter("node_lifecycle_zone_disruption")
SITE_LAPSE_SHARE = 0.55
SITE_LAPSE_MIN_NODES = 3
# A leaf switch or a rack (its PDU, its top-of-rack switch) is suspected when at least 3 of its
# nodes, and at least half of those reporting, went silent within one minute of each other:
# independent node faults at the Llama 3 rate (~0.004 per node-day) almost never do that.
LAPSE_WINDOW = timedelta(seconds=60)
GROUP_LAPSE_MIN_NODES = 3
GROUP_LAPSE_SHARE = 0.5


def group_lapse_min_nodes(reporting: int) -> int:
    """How many of a leaf's or rack's nodes must fall silent together, from its size: every node
    of a domain of 2 (the demo's H100 racks: two independent faults within a minute at ~0.004 per
    node-day is ~1e-8 a day), else GROUP_LAPSE_MIN_NODES. A domain of one node has no correlated
    silence to see: its node's own lapse says the rack is dark (health.services.sweep)."""
    return max(2, min(GROUP_LAPSE_MIN_NODES, reporting))


# Correlated fabric failures (health.services.fabric): a dead leaf switch, or a fabric domain's
# spine or subnet manager, takes down the links of many nodes at once. The thresholds are the
# lapse rules' (per leaf, and per fabric domain as per site), over a window of one health-report
# interval (300 s, when the ib_link checks of a leaf's nodes come in) plus one sweep.
FABRIC_SIGNALS = frozenset({"ib_link", "ib_port_down", "ib_link_flapping"})
# These are the defaults; a deployment tunes them with HEALTH_FABRIC_* (config/settings.py, bounded
# there), read on every sweep through fabric_thresholds().
FABRIC_WINDOW = timedelta(seconds=330)
FABRIC_LEAF_MIN_NODES = GROUP_LAPSE_MIN_NODES
FABRIC_LEAF_SHARE = GROUP_LAPSE_SHARE
FABRIC_DOMAIN_MIN_NODES = SITE_LAPSE_MIN_NODES
FABRIC_DOMAIN_SHARE = SITE_LAPSE_SHARE


@dataclass(frozen=True)
class FabricThresholds:
    leaf_min_nodes: int
    leaf_share: float
    domain_min_nodes: int
    domain_share: float
    window: timedelta


def fabric_thresholds() -> FabricThresholds:
    """The fabric rules as configured (settings.HEALTH_FABRIC_*, defaults the constants above)."""
    return FabricThresholds(
        leaf_min_nodes=settings.HEALTH_FABRIC_LEAF_MIN_NODES,
        leaf_share=settings.HEALTH_FABRIC_LEAF_SHARE,
        domain_min_nodes=settings.HEALTH_FABRIC_DOMAIN_MIN_NODES,
        domain_share=settings.HEALTH_FABRIC_DOMAIN_SHARE,
        window=timedelta(seconds=settings.HEALTH_FABRIC_WINDOW_S),
    )


REPEAT_WINDOW = timedelta(days=7)  # same fault twice in 7 days → fatal
FLAP_WINDOW = timedelta(days=7)  # failed validation (or burn-in) twice in 7 days → an operator decides
FLAP_FAILURES = 2
# Burn-in is judged per intake: one failure since enrolment (or return from RMA), and a later
# pass waits for a named person's decision, however many days apart (a part awaited).
BURN_IN_FAILURES_BEFORE_HOLD = 1
RMA_WINDOW = timedelta(days=30)  # third triage in 30 days → RMA
RMA_TRIAGES = 3
EVENT_EXPIRY = timedelta(hours=24)  # an info/warn event signal that does not recur clears after this
HISTORY_RETENTION = timedelta(days=30)  # ConditionEvent rows older than this are pruned by the sweep

# ---- thermal: throttle reasons and per-SKU slowdown temperature, sustained over a window ------
THERMAL_WINDOW = timedelta(minutes=10)  # OWN_CHOICE: a burst of slowdown under a load step is not a fault
# Fallback slowdown temperature per GPU model when the GPU does not report its own threshold
# (NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, which the agent sends as `slowdown_temp_c`).
SLOWDOWN_TEMP_C: dict[str, int] = {
    "H100": 89,  # nvidia-smi -q gpu_temp_slow_threshold on H100 SXM5 (recorded in tests/agent/samples)
}
THERMAL_THROTTLE_C = SLOWDOWN_TEMP_C["H100"]  # kept for the console line and older callers
THROTTLE_THERMAL_BITS = 0x20 | 0x40  # SW thermal slowdown | HW thermal slowdown (NVML)

# ---- links: error counters and flaps over the agent's one-hour window -------------------------
LINK_WINDOW = timedelta(hours=1)
IB_LINK_DOWNED_REPAIR = 3  # OWN_CHOICE: three downs of one port in an hour is a flapping link
IB_SYMBOL_ERRORS_WARN = 100  # OWN_CHOICE: symbol errors per hour worth a look (BER degrading)
NVLINK_ERRORS_WARN = 100  # OWN_CHOICE: NVLink replay+recovery+CRC errors per hour (DCGM flags any increase)

# ---- NVML recovery action (nvmlDeviceGpuRecoveryAction_t) -----------------------------------
RECOVERY_ACTIONS: dict[int, tuple[str, str | None, str]] = {
    # value: (name, severity or None for no action, what NVIDIA says to do)
    0: ("none", None, "no action: the GPU can be used again by a new process"),
    1: ("gpu_reset", S.RESET, "terminate GPU processes and reset the GPU"),
    2: ("node_reboot", S.REBOOT, "reboot the node: the OS may be in an inconsistent state"),
    3: (
        "drain_p2p",
        S.DEFER,
        "stop P2P processes and re-read (the next value decides): no new work; reset when the node is free",
    ),
    4: ("drain_and_reset", S.RESET, "drain peer-to-peer traffic and reset the GPU; holds the NVLink domain"),
    5: ("recover_imex_domain", S.REBOOT, "recover the IMEX (NVLink) domain: every tray of the domain"),
    6: ("bus_reset", S.RESET, "reset the GPU's PCIe bus"),
    7: ("system_reboot", S.REBOOT, "reboot the system"),
}

ACTIONS: dict[str, str] = {
    S.INFO: "record",
    S.WARN: "mark degraded (placed last)",
    S.DEFER: "cordon from new work (tenant stays) → when free: quarantine → GPU reset → DCGM r2 + NCCL + IB → validate",
    S.HOLD: "cordon from new work (tenant stays) → operator task naming the signal; closing it lifts the hold",
    S.RESET: "quarantine → drain → GPU reset → DCGM r2 + NCCL + IB → validate",
    S.REBOOT: "quarantine → drain → power cycle through the BMC (the agent's reboot without one) → DCGM r3 + NCCL + IB → validate",
    S.REPAIR: "quarantine → triage with a repair ticket (cable/transceiver); no reset, no power cycle",
    S.FATAL: "quarantine → triage → repair or RMA; tenant credited; capacity backfilled",
}


@dataclass(frozen=True)
class Rule:
    signal: str
    severity: str
    description: str
    source: str
    event: bool = False  # an occurrence (XID), not a level the heartbeat re-reports
    then: str = ""  # what the sweep does beyond the severity's chain


# XIDs: every row of NVIDIA's catalogue (core/reference/xid_catalog.csv) with the rule health.xid
# derives from its bucket; with no decode fields at hand (the table's row). The heartbeat ingest
# decides each reported Xid with its fields (health.xid.decide_gpu).
XID_CATALOG_ROWS = xid.catalog()


def _xid_rule(row: xid.CatalogRow) -> Rule:
    decision = xid.decide(row.xid)
    then = [f"override {name}: {xid.OVERRIDES[name].reason}" for name in row.overrides]
    if row.deferred or decision.severity == S.DEFER:
        then.append("no new work; GPU reset when the node is next free")
    if row.repeat_diagnostics:
        then.append(f"repeating on one GPU: {REPEAT_DIAGNOSTIC} at the next idle window, then field diagnostics")
    if row.software:
        then.append("software investigation: never counted toward the repeat or RMA rules")
    if f"xid_{row.xid}" in IDLE_DIAGNOSTIC_SIGNALS:
        then.append("DCGM level 4 at next idle (node available, no tenant)")
    return Rule(
        f"xid_{row.xid}",
        decision.severity,
        f"XID {row.xid}: {row.mnemonic}",
        f"{xid.CATALOG_SOURCE}: {row.immediate_action}"
        + (f" ({row.immediate_notes})" if row.immediate_notes else "")
        + f"; investigatory: {row.investigatory_action}",
        event=True,
        then="; ".join(then),
    )


REPEAT_DIAGNOSTIC = "dcgm_r3"  # the longest DCGM run the agent has, standing in for DCGM EUD
IDLE_DIAGNOSTIC_SIGNALS = {"xid_92": "dcgm_r4", "app_xid_repeat": REPEAT_DIAGNOSTIC}
XID_SEVERITY: dict[int, str] = {x: xid.decide(x).severity for x in XID_CATALOG_ROWS}
XID_DESCRIPTIONS = {x: row.mnemonic for x, row in XID_CATALOG_ROWS.items()}
UNLISTED_XID_SEVERITY = xid.UNKNOWN_XID.severity  # a person decides; never dropped
SOFTWARE_SIGNALS = xid.software_signals()
REPEAT_DIAGNOSTIC_SIGNALS = xid.repeat_diagnostic_signals()

RULES: dict[str, Rule] = {
    **{f"xid_{x}": _xid_rule(row) for x, row in XID_CATALOG_ROWS.items()},
    "app_xid_repeat": Rule(
        "app_xid_repeat",
        S.WARN,
        "an application Xid repeating on the same GPU (catalogue workflow for Xid 13/31)",
        f"{xid.CATALOG_SOURCE}: WORKFLOW_XID_13 / WORKFLOW_XID_31 (RUN_DCGMEUD then RUN_FIELDDIAGS)",
        then=f"{REPEAT_DIAGNOSTIC} at the next idle window; a fail is fatal (field diagnostics in triage)",
    ),
    **{
        f"recovery_{name}": Rule(
            f"recovery_{name}",
            sev,
            f"NVML recovery action {value} ({name}): {what}",
            NVML_RECOVERY,
            then="holds the NVLink domain on rack-scale systems" if value in (3, 4, 5) else "",
        )
        for value, (name, sev, what) in RECOVERY_ACTIONS.items()
        if sev is not None
    },
    "ecc_sbe": Rule("ecc_sbe", S.INFO, "single-bit ECC errors corrected", NVIDIA_ROW_REMAP),
    "row_remap_pending": Rule("row_remap_pending", S.WARN, "row remap pending (needs a GPU reset)", NVIDIA_ROW_REMAP),
    "row_remap_failed": Rule("row_remap_failed", S.FATAL, "row remap failed (no spare rows)", NVIDIA_ROW_REMAP),
    "thermal_slowdown": Rule(
        "thermal_slowdown",
        S.INFO,
        "thermal slowdown now: a thermal throttle reason is set, or the temperature is at the "
        "GPU's slowdown threshold (its own, else the per-SKU table)",
        NVML_THROTTLE,
    ),
    "thermal_throttle": Rule(
        "thermal_throttle",
        S.WARN,
        f"thermal slowdown sustained for {int(THERMAL_WINDOW.total_seconds() // 60)} min",
        f"{NVML_THROTTLE}; window: {OWN_CHOICE}",
    ),
    "nvlink_down": Rule(
        "nvlink_down",
        S.REBOOT,
        "NVLink link(s) down",
        XID_CATALOG + " (NVLink)",
        then="holds the NVLink domain on rack-scale systems",
    ),
    "nvlink_errors": Rule(
        "nvlink_errors",
        S.WARN,
        f"NVLink replay/recovery/CRC errors ≥ {NVLINK_ERRORS_WARN} in an hour",
        f"NVML NVLink error counters; threshold: {OWN_CHOICE}",
    ),
    "gpu_count_mismatch": Rule(
        "gpu_count_mismatch",
        S.REBOOT,
        "heartbeat reports fewer GPUs than the node type",
        XID_CATALOG + " (XID 79 class: GPU missing from the bus)",
    ),
    "ib_link": Rule(
        "ib_link",
        S.REPAIR,
        "InfiniBand port down (ib_link check failed)",
        IB_SOURCE,
        then="repair ticket: inspect or replace the cable/transceiver",
    ),
    "ib_port_down": Rule(
        "ib_port_down",
        S.REPAIR,
        "InfiniBand port down (heartbeat port state)",
        IB_SOURCE,
        then="repair ticket: inspect or replace the cable/transceiver",
    ),
    "ib_link_flapping": Rule(
        "ib_link_flapping",
        S.REPAIR,
        f"InfiniBand port went down ≥ {IB_LINK_DOWNED_REPAIR} times in an hour",
        f"{IB_SOURCE}; threshold: {OWN_CHOICE}",
        then="repair ticket: inspect or replace the cable/transceiver",
    ),
    "ib_symbol_errors": Rule(
        "ib_symbol_errors",
        S.WARN,
        f"InfiniBand symbol errors (ib_link check warned, or ≥ {IB_SYMBOL_ERRORS_WARN} in an hour)",
        f"{IB_SOURCE}; threshold: {OWN_CHOICE}",
    ),
    "nvme_smart": Rule("nvme_smart", S.WARN, "NVMe SMART warning", "NVMe specification, SMART critical warning"),
    "heartbeat_lost": Rule(
        "heartbeat_lost", S.REBOOT, "no heartbeat for 300 s", f"{HEARTBEAT_SOURCE.source} ({HEARTBEAT_SOURCE.value})"
    ),
    "dcgm_r1": Rule("dcgm_r1", S.RESET, "DCGM level 1 failed", DCGM_SOURCE),
    "dcgm_r2": Rule("dcgm_r2", S.REBOOT, "DCGM level 2 failed", DCGM_SOURCE),
    "dcgm_r3": Rule("dcgm_r3", S.FATAL, "DCGM level 3 failed", DCGM_SOURCE),
    "dcgm_r4": Rule("dcgm_r4", S.FATAL, "DCGM level 4 (memory tests) failed", DCGM_SOURCE),
    "nccl_allreduce": Rule(
        "nccl_allreduce",
        S.RESET,
        "NCCL all-reduce below expected bandwidth or failed",
        "NCCL tests (all_reduce_perf) bus bandwidth",
    ),
    "burn_in": Rule("burn_in", S.FATAL, "burn-in failed", f"facility.csv burn_in_per_rack: {BURN_IN_SOURCE.source}"),
}

# Signals that, on a rack-scale system (NVL72), hold every tray of the NVLink domain.
DOMAIN_SIGNALS = frozenset(
    {
        "nvlink_down",
        "xid_74",
        "xid_154",
        *(f"xid_{x}" for x in range(144, 151)),
        "recovery_drain_p2p",
        "recovery_drain_and_reset",
        "recovery_recover_imex_domain",
    }
)
REPAIR_TICKET = "repair ticket: inspect or replace the cable/transceiver of the port; a power cycle will not fix it"

# Cordon reasons of nodes that keep their tenant: an operator decides; a reset waits for release.
HOLD_CORDON = "operator decision"
DEFER_CORDON = "GPU reset at next release"

# Escalations the sweep applies on top of single signals (need history or combinations).
ESCALATIONS: tuple[tuple[str, str, str, str], ...] = (
    (
        "same hardware fault twice in 7 days",
        S.FATAL,
        "a reset/reboot-class signal raised again within 7 days; software-investigation Xids "
        "(investigatory INVESTIGATE_SW*) are not counted",
        f"{OWN_CHOICE}; software exemption: {xid.CATALOG_SOURCE}, investigatory action",
    ),
    (
        "application Xid (13, 31) twice on the same GPU",
        S.WARN,
        f"xid_repeat raised: {REPEAT_DIAGNOSTIC} at the next idle window, then field diagnostics",
        f"{xid.CATALOG_SOURCE}: WORKFLOW_XID_13 / WORKFLOW_XID_31",
    ),
    (
        "defer-class signal (Xid 94, 121, drain P2P)",
        "reset at release",
        "cordoned from new work while the tenant runs; quarantine → reset → validate once no allocation holds it",
        f"{xid.CATALOG_SOURCE}: 'reset the GPU when convenient'",
    ),
    (
        "hold-class signal (CONTACT_SUPPORT, CHECK_MECHANICALS, UPDATE_SWFW, unknown Xid, undecoded)",
        "operator decision",
        "cordoned from new work, tenant stays; an operator task (incident) names the Xid, the GPU and the "
        "catalogue's words; closing it (audited) clears the hold",
        f"{xid.CATALOG_SOURCE}; unknown Xids: NVIDIA's remediation treats them as needing a person",
    ),
    (
        "failed validation twice in 7 days, or burn-in at all since intake",
        "operator decision",
        "a pass after those failures is not accepted unattended: triage (validation) or burn_in_failed "
        "(burn-in; the failed checks named on the node's trail)",
        OWN_CHOICE,
    ),
    ("third triage in 30 days", "rma", "sent for RMA (through the drive gate)", OWN_CHOICE),
    (
        f"thermal_slowdown for {int(THERMAL_WINDOW.total_seconds() // 60)} min",
        S.WARN,
        "thermal_throttle raised",
        f"{NVML_THROTTLE}; window: {OWN_CHOICE}",
    ),
    (
        "GPU/NVLink fault on an NVL72 tray",
        "hold domain",
        "every tray of the rack's NVLink domain is cordoned and its tenants moved off as a unit",
        "NVIDIA GB200 NVL72: 72 GPUs in one NVLink domain (generations.csv)",
    ),
)

# A failing health-report check raises the condition named here; a warning raises the second.
CHECK_FAIL_SIGNAL = {
    name: name
    for name in ("dcgm_r1", "dcgm_r2", "dcgm_r3", "dcgm_r4", "nccl_allreduce", "ib_link", "nvme_smart", "burn_in")
}
CHECK_WARN_SIGNAL = {"ib_link": "ib_symbol_errors", "nvme_smart": "nvme_smart"}
# A passing check clears these conditions.
CHECK_PASS_CLEARS = {
    name: [name] + ([CHECK_WARN_SIGNAL[name]] if name in CHECK_WARN_SIGNAL else []) for name in CHECK_FAIL_SIGNAL
}

# Signals the control plane observes itself; every other signal is the node's own agent's word
# (heartbeats, health reports), which a tenant with root on the node can write. A pull on those
# alone while a tenant holds the node opens its incident `unconfirmed`: no automatic SLA credit.
CONTROL_PLANE_SIGNALS = frozenset({"heartbeat_lost"})

# Level signals the heartbeat reports every time: absent from a heartbeat → cleared.
HEARTBEAT_LEVEL_SIGNALS = frozenset(
    {
        "ecc_sbe",
        "row_remap_pending",
        "thermal_slowdown",
        "nvlink_down",
        "nvlink_errors",
        "gpu_count_mismatch",
        "heartbeat_lost",
        "ib_port_down",
        "ib_link_flapping",
        *(f"recovery_{name}" for name, sev, _ in RECOVERY_ACTIONS.values() if sev is not None),
    }
)

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


def slowdown_temp_c(gpu_model: str) -> int | None:
    """The per-SKU fallback slowdown temperature for a node type's GPU model."""
    for prefix, temp in SLOWDOWN_TEMP_C.items():
        if gpu_model.upper().startswith(prefix):
            return temp
    return None


def policy_rows() -> list[dict]:
    """The table the console shows: one row per signal, most severe first, each with its source."""

    rows = [
        {
            "signal": r.signal,
            "severity": r.severity,
            "description": r.description,
            "source": r.source,
            "action": ACTIONS[r.severity] + (f"; {r.then}" if r.then else ""),
        }
        for r in RULES.values()
    ]
    return sorted(rows, key=lambda r: (-SEVERITY_RANK[r["severity"]], r["signal"]))
