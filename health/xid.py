"""NVIDIA's Xid catalogue as data, and Hangar's rule for each Xid derived from it.

`core/reference/xid_catalog.csv` holds the catalogue's rows (NVIDIA, "Analyzing Xid Errors with
the Xid Catalog", Table 1) and `xid_nvlink5_decode.csv` its Xid 144-150 decode table. Nothing
here names an Xid's meaning by hand: each row's immediate-action bucket maps to a Hangar
severity through `BUCKETS`, workflow rows are decoded from the fields the agent sends (Xid 154's
recovery action, 144-150's unit and errorStatus), and every place Hangar deliberately departs
from the catalogue is an entry of `OVERRIDES` with its reason. Extending the catalogue is adding
rows to the CSV; a bucket this module does not know goes to an operator, never silently dropped.

Pure functions over plain values: the sweep, the heartbeat ingest, the policy page, the docs
generator and the month simulator all call `decide()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from core.reference_data import table

from .choices import SEVERITY_RANK
from .choices import Severity as S

CATALOG_SOURCE = (
    "NVIDIA, Analyzing Xid Errors with the Xid Catalog (docs.nvidia.com/deploy/xid-errors/"
    "analyzing-xid-catalog.html), Table 1"
)
DECODE_SOURCE = CATALOG_SOURCE.replace("Table 1", "Xid 144-150 Decode table")


@dataclass(frozen=True)
class Bucket:
    severity: str
    says: str  # what NVIDIA's bucket asks for, in words


# NVIDIA's immediate-action buckets → what Hangar does. Decoded buckets (XID_154, WORKFLOW_*,
# CHECK_UVM) have their undecoded fallback here; `decide()` refines them from the event's fields.
BUCKETS: dict[str, Bucket] = {
    "IGNORE": Bucket(S.INFO, "no action: the GPU is healthy"),
    "RESTART_APP": Bucket(S.INFO, "restart the application: the job failed, the GPU is healthy"),
    "RESET_GPU": Bucket(S.RESET, "reset the GPU"),
    "DRAIN_AND_RESET": Bucket(S.RESET, "drain the GPU's work, then reset it"),
    "RESTART_BM": Bucket(S.REBOOT, "restart the bare-metal node"),
    "RESTART_VM": Bucket(S.RESET, "restart the virtual machine"),
    "RESTART_FM": Bucket(S.HOLD, "restart the NVIDIA Fabric Manager"),
    "CONTACT_SUPPORT": Bucket(S.HOLD, "contact NVIDIA support"),
    "CHECK_MECHANICALS": Bucket(S.HOLD, "check cooling, power and seating"),
    "UPDATE_SWFW": Bucket(S.HOLD, "update the driver or firmware"),
    "unconfirmed": Bucket(S.HOLD, "the catalogue revision read has no action for it"),
    "XID_154": Bucket(S.HOLD, "follow the recovery action Xid 154 reports"),
    "XID_154_EVAL": Bucket(S.INFO, "Xid 154's action if it is present, else restart the application"),
    "WORKFLOW_XID_45": Bucket(S.HOLD, "alone: restart the Fabric Manager; with another Xid: follow that Xid"),
    "WORKFLOW_XID_48": Bucket(S.RESET, "alone: reset the GPU; with Xid 63 or 64: drain and reset"),
    "WORKFLOW_NVLINK_ERR": Bucket(S.RESET, "decode the seven NVLink error registers bit by bit"),
    "WORKFLOW_NVLINK5_ERR": Bucket(S.HOLD, "decode intrInfo and errorStatus against the 144-150 table"),
    "CHECK_UVM": Bucket(S.DEFER, "reset the GPU if UVM or vGPU is in use, else ignore"),
}
UNKNOWN_BUCKET = Bucket(S.HOLD, "a bucket this version of Hangar does not know")
UNKNOWN_XID = Bucket(S.HOLD, "not in the catalogue: NVIDIA's remediation treats an unknown Xid as needing a person")

# Notes in the catalogue that ask for a reset, but not now.
DEFERRED_NOTES = ("reset the GPU when convenient", "reset at a service window")
# Investigatory actions that are software investigations: such a signal repeating is not a
# hardware trend, so it never counts toward the repeat-to-fatal or triage-to-RMA rules.
SOFTWARE_INVESTIGATIONS = ("INVESTIGATE_SW",)
# RESTART_APP rows whose investigatory workflow asks for diagnostics when they repeat on one GPU.
REPEAT_DIAGNOSTIC_WORKFLOWS = ("WORKFLOW_XID_13", "WORKFLOW_XID_31")

# Xid 154's text and NVML's nvmlDeviceGpuRecoveryAction_t: the same five actions.
RECOVERY_ACTION_NAMES = {
    0: "None",
    1: "GPU Reset Required",
    2: "Node Reboot Required",
    3: "Drain P2P",
    4: "Drain and Reset",
}
RECOVERY_ACTION_BUCKET = {
    0: Bucket(S.INFO, "Xid 154 reports no recovery action needed"),
    1: BUCKETS["RESET_GPU"],
    2: BUCKETS["RESTART_BM"],
    # Drain P2P: stop P2P processes and re-read; the next value decides. Hangar cannot stop a
    # tenant's P2P work for it, so the node takes no new work and is reset when it is free.
    3: Bucket(S.DEFER, "stop P2P processes, disable UVM persistence, re-read the recovery action"),
    4: BUCKETS["DRAIN_AND_RESET"],
}


@dataclass(frozen=True)
class Override:
    name: str
    xids: tuple[int, ...]
    catalogue: str  # what the catalogue says
    hangar: str  # what Hangar does instead
    reason: str


OVERRIDES: dict[str, Override] = {
    o.name: o
    for o in (
        Override(
            "xid_74_registers_undecoded",
            (74,),
            "WORKFLOW_NVLINK_ERR: some register bits are ignorable, others need a reseat or field diagnostics",
            "reset the GPU whatever the registers say (the registers are recorded on the condition)",
            "the per-bit register table is not in the catalogue rows Hangar loads; the catalogue's own "
            "trigger text says a GPU reset or a node reboot clears it, and the reset is the milder",
        ),
        Override(
            "xid_149_link_down",
            (149,),
            "NETIR_LINK_DOWN: most reasons RESET_GPU, two reasons IGNORE",
            "every NETIR_LINK_DOWN reason resets the GPU",
            "the catalogue revision read does not name the two ignorable reasons",
        ),
        Override(
            "restart_vm_bare_metal",
            (151,),
            "RESTART_VM",
            "reset the GPU",
            "Hangar rents bare-metal nodes: restarting the tenant's VM is what resets a passed-through GPU",
        ),
        Override(
            "check_uvm_unknown",
            (159,),
            "CHECK_UVM: reset the GPU if UVM or vGPU is in use, else ignore",
            "reset the GPU at the node's next release; no new work meanwhile",
            "Hangar cannot see whether the tenant's job uses UVM; a reset when the node is free covers "
            "that case without evicting anyone",
        ),
        Override(
            "nvlink5_undecoded",
            tuple(range(144, 151)),
            "WORKFLOW_NVLINK5_ERR: decode intrInfo/errorStatus",
            "without decode fields, or with a unit/errorStatus the table lacks: operator decision",
            "an undecoded 144-150 ranges from IGNORE to RESET_GPU; a person reads the Xid message",
        ),
        Override(
            "xid_154_without_action",
            (154,),
            "XID_154: follow the recovery action it reports",
            "without the action (an agent that could not read it): operator decision",
            "the action is the whole content of Xid 154; guessing a reboot evicted tenants for None",
        ),
        Override(
            "xid_92_idle_diagnostic",
            (92,),
            "IGNORE (investigatory: CONTACT_SUPPORT)",
            "no action while a tenant runs; DCGM level 4 the next time the node is idle",
            "an excessive single-bit rate is what precedes double-bit errors; the memory test costs no tenant",
        ),
        Override(
            "wrong_family",
            (),
            "the Xid's column for this GPU family says NO",
            "operator decision, whatever the row's bucket",
            "an Xid the catalogue says this family does not emit is a driver or decode surprise a person reads",
        ),
    )
}


@dataclass(frozen=True)
class CatalogRow:
    xid: int
    mnemonic: str
    h100: bool
    gb200: bool
    immediate_action: str
    immediate_notes: str
    investigatory_action: str
    source: str

    @property
    def bucket(self) -> Bucket:
        return BUCKETS.get(self.immediate_action, UNKNOWN_BUCKET)

    @property
    def deferred(self) -> bool:
        return any(n.lower() in self.immediate_notes.lower() for n in DEFERRED_NOTES)

    @property
    def severity(self) -> str:
        """The rule with no decode fields at hand (the policy table's row)."""
        if self.deferred and self.bucket.severity in (S.INFO, S.WARN):
            return S.DEFER
        return self.bucket.severity

    @property
    def software(self) -> bool:
        return self.investigatory_action.startswith(SOFTWARE_INVESTIGATIONS)

    @property
    def repeat_diagnostics(self) -> bool:
        return self.investigatory_action.startswith(REPEAT_DIAGNOSTIC_WORKFLOWS)

    @property
    def overrides(self) -> tuple[str, ...]:
        return tuple(o.name for o in OVERRIDES.values() if self.xid in o.xids)


@cache
def catalog() -> dict[int, CatalogRow]:
    rows: dict[int, CatalogRow] = {}
    for raw in table("xid_catalog.csv"):
        xid = int(raw["xid"])
        if xid in rows:
            raise ValueError(f"xid_catalog.csv: Xid {xid} listed twice")
        rows[xid] = CatalogRow(
            xid=xid,
            mnemonic=raw["mnemonic"],
            h100=raw["h100"] == "YES",
            gb200=raw["gb200"] == "YES",
            immediate_action=raw["immediate_action"],
            immediate_notes=raw["immediate_notes"],
            investigatory_action=raw["investigatory_action"],
            source=raw["source"],
        )
    return rows


@cache
def nvlink5_decode() -> dict[tuple[int, str, str], str]:
    """{(xid, unit, errorStatus): bucket}; '*' matches any unit or errorStatus."""
    decoded = {}
    for raw in table("xid_nvlink5_decode.csv"):
        status = raw["error_status"] if raw["error_status"] == "*" else hex(int(raw["error_status"], 16))
        decoded[(int(raw["xid"]), raw["unit"], status)] = raw["action"]
    return decoded


def family(gpu_model: str) -> str:
    """The catalogue column a GPU model reads ('h100', 'gb200'), or '' (no column: Ampere)."""
    model = (gpu_model or "").upper()
    if model.startswith(("H100", "H200", "GH200")):
        return "h100"
    if model.startswith(("B200", "GB200", "B300", "GB300")):
        return "gb200"
    return ""


# The heartbeat's gpu_architecture, for a node type whose GPU model names no family.
ARCHITECTURE_FAMILY = {"hopper": "h100", "blackwell": "gb200", "ampere": ""}


@dataclass(frozen=True)
class Decision:
    xid: int
    severity: str
    catalogue: str  # the row's bucket (or decode row) as NVIDIA writes it
    says: str
    override: str = ""  # the OVERRIDES name when Hangar departs from the catalogue

    def text(self, gpu) -> str:
        where = f" on GPU {gpu}" if gpu is not None else ""
        tail = f" [override {self.override}]" if self.override else ""
        return f"Xid {self.xid}{where}: catalogue {self.catalogue} ({self.says}){tail}"


def _action_of_154(event: Mapping | None) -> int | None:
    if not event:
        return None
    value = event.get("recovery_action")
    return value if type(value) is int and value in RECOVERY_ACTION_NAMES else None


def decide(
    xid: int,
    *,
    gpu_family: str = "",
    event: Mapping | None = None,
    others: Iterable[int] = (),
    xid_154: Mapping | None = None,
) -> Decision:
    """Hangar's action for one Xid on one GPU.

    `event`: the Xid's decoded fields ({recovery_action} for 154, {unit, error_status} for
    144-150, {registers} for 74); `others`: the other Xids the GPU reported with it; `xid_154`:
    the fields of a 154 reported with it (its recovery action), for the rows that defer to it."""
    others = set(others) - {xid}
    row = catalog().get(xid)
    if row is None:
        return Decision(xid, UNKNOWN_XID.severity, "not listed", UNKNOWN_XID.says)
    if gpu_family and not getattr(row, gpu_family):
        return Decision(
            xid, S.HOLD, f"{gpu_family.upper()}=NO", OVERRIDES["wrong_family"].hangar, override="wrong_family"
        )
    action = row.immediate_action
    if action == "XID_154":
        value = _action_of_154(event)
        if value is None:
            return Decision(xid, S.HOLD, action, row.bucket.says, override="xid_154_without_action")
        bucket = RECOVERY_ACTION_BUCKET[value]
        return Decision(xid, bucket.severity, f"XID_154 {RECOVERY_ACTION_NAMES[value]}", bucket.says)
    if action == "WORKFLOW_XID_45":
        name = "RESTART_FM" if not others else "IGNORE"
        return Decision(
            xid, BUCKETS[name].severity, f"{action} {'solo' if not others else 'with another Xid'}", BUCKETS[name].says
        )
    if action == "WORKFLOW_XID_48":
        name = "DRAIN_AND_RESET" if others & {63, 64} else "RESET_GPU"
        return Decision(xid, BUCKETS[name].severity, f"{action} {name}", BUCKETS[name].says)
    if action == "WORKFLOW_NVLINK_ERR":
        return Decision(xid, S.RESET, action, row.bucket.says, override="xid_74_registers_undecoded")
    if action == "WORKFLOW_NVLINK5_ERR":
        return _decode_nvlink5(row, event, xid_154)
    if action == "RESTART_VM":
        return Decision(xid, S.RESET, action, row.bucket.says, override="restart_vm_bare_metal")
    if action == "CHECK_UVM":
        return Decision(xid, S.DEFER, action, row.bucket.says, override="check_uvm_unknown")
    return Decision(xid, row.severity, action, row.bucket.says)


def _decode_nvlink5(row: CatalogRow, event: Mapping | None, xid_154: Mapping | None) -> Decision:
    unit = (event or {}).get("unit")
    status = (event or {}).get("error_status")
    table_ = nvlink5_decode()
    found = None
    if isinstance(unit, str) and type(status) is int:
        for key in ((row.xid, unit, hex(status)), (row.xid, unit, "*"), (row.xid, "*", "*")):
            if key in table_:
                found = (key, table_[key])
                break
    if found is None:
        return Decision(row.xid, S.HOLD, row.immediate_action, row.bucket.says, override="nvlink5_undecoded")
    (_, unit_, status_), action = found
    where = f"{row.immediate_action} {unit_} {status_}: {action}"
    if action == "XID_154_EVAL":
        value = _action_of_154(xid_154)
        if value is None:
            return Decision(
                row.xid, BUCKETS["RESTART_APP"].severity, where + " (no 154: RESTART_APP)", BUCKETS["RESTART_APP"].says
            )
        bucket = RECOVERY_ACTION_BUCKET[value]
        return Decision(row.xid, bucket.severity, where + f" (154: {RECOVERY_ACTION_NAMES[value]})", bucket.says)
    override = "xid_149_link_down" if (row.xid, unit_) == (149, "NETIR_LINK_DOWN") else ""
    return Decision(row.xid, BUCKETS[action].severity, where, BUCKETS[action].says, override=override)


def decide_gpu(events: Mapping[int, Mapping], *, gpu_family: str = "") -> dict[int, Decision]:
    """Every Xid one GPU reported in one heartbeat ({xid: fields}), each decided in the company
    of the others (Xid 45 and 48 read their neighbours; 144-150 read a 154)."""
    xids = set(events)
    return {
        xid: decide(xid, gpu_family=gpu_family, event=fields, others=xids, xid_154=events.get(154))
        for xid, fields in events.items()
    }


def worst(severities: Iterable[str]) -> str:
    return max(severities, key=SEVERITY_RANK.__getitem__, default=S.INFO)


def software_signals() -> frozenset[str]:
    """`xid_N` signals whose repetition is a software matter (never counted toward RMA)."""
    return frozenset(f"xid_{r.xid}" for r in catalog().values() if r.software)


def repeat_diagnostic_signals() -> frozenset[str]:
    return frozenset(f"xid_{r.xid}" for r in catalog().values() if r.repeat_diagnostics)
