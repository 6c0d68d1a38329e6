"""The drive gate: the one check every exit from custody passes.

An exit is `rma` (the node ships to a vendor), `retire`, `dispose` or a chain-of-custody
transfer off site. `fleet.services.lifecycle.transition()` runs this gate for every move
into `rma`, `retired` or `disposed`, so the console, the admin, the API and the automatic
loops all meet the same refusal; `record_custody_transfer` runs it for transfers.

What the gate asks, per node (NIST SP 800-88 Rev. 1):
- the agent's drive inventory exists, was taken after the node last served a tenant and
  after its last burn-in or decommissioning entry, and agrees with the Drive rows
  (every reported drive has a row on this node; no row is flagged missing);
- every drive has a counting sanitisation record: verified, with evidence, made after the
  last tenant use, by a method at least as strong as the destination needs — inside the
  organisation (redeploy, lease) `clear`; leaving it (resale, recycle, RMA) `purge`, or
  `destroy` for a drive that cannot be purged;
- an RMA whose drives must ship with the node may instead carry an `rma_shipment` custody
  record naming the carrier and declaring every inventoried drive's status.

Reads only (a fixed number of queries for any number of nodes); it imports no service so
that the lifecycle can call it.
"""

from dataclasses import dataclass, field

from django.db.models import Max, Q

from fleet.choices import CustodyKind, DispositionOption, SanitizationMethod
from fleet.choices import Lifecycle as L
from fleet.models import CustodyTransfer, Drive, Node, NodeDriveInventory, NodeEvent, SanitizationRecord

RMA, RETIRE, DISPOSE, CUSTODY = "rma", "retire", "dispose", "custody"
EXIT_OF_STATE = {L.RMA: RMA, L.RETIRED: RETIRE, L.DISPOSED: DISPOSE}
INSIDE, OUTSIDE = "inside", "outside"
# Disposition options that keep the hardware inside the organisation.
INSIDE_OPTIONS = frozenset({DispositionOption.REDEPLOY, DispositionOption.LEASE})
METHOD_RANK = {SanitizationMethod.CLEAR: 1, SanitizationMethod.PURGE: 2, SanitizationMethod.DESTROY: 3}
# The inventory must be newer than the node's last tenant use and than its last entry into one
# of these: burn-in (hardware may have changed in repair or RMA) and decommissioning (the way
# out starts; the agent counts again while the drives are sanitised).
EXIT_PATH_STATES = (L.BURN_IN, L.DECOMMISSIONING)


def required_method(*, destination: str, self_encrypting: bool, purge_supported: bool) -> str:
    """NIST SP 800-88: media reused inside the organisation may be cleared; media leaving it
    is purged, and destroyed when it cannot be purged."""
    if destination == INSIDE:
        return SanitizationMethod.CLEAR
    return SanitizationMethod.PURGE if (self_encrypting or purge_supported) else SanitizationMethod.DESTROY


@dataclass(frozen=True)
class DriveLine:
    serial: str
    drive_id: str | None
    model: str
    required: str
    record_id: str | None  # the counting record, if any
    record_method: str | None
    ok: bool
    problem: str = ""

    def as_dict(self) -> dict:
        return {
            "serial": self.serial,
            "drive_id": self.drive_id,
            "model": self.model,
            "required_method": self.required,
            "record_id": self.record_id,
            "record_method": self.record_method,
            "ok": self.ok,
            "problem": self.problem,
        }


@dataclass
class GateStatus:
    exit: str
    destination: str
    inventory_reported_at: object
    drives: list[DriveLine] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # inventory and shipment problems
    shipped_aboard: bool = False  # an RMA whose drives ship with the node, under custody

    @property
    def missing(self) -> list[str]:
        return self.problems + [d.problem for d in self.drives if not d.ok]

    @property
    def passed(self) -> bool:
        return not self.missing

    def as_dict(self) -> dict:
        return {
            "exit": self.exit,
            "destination": self.destination,
            "inventory_reported_at": self.inventory_reported_at.isoformat() if self.inventory_reported_at else None,
            "passed": self.passed,
            "shipped_aboard": self.shipped_aboard,
            "missing": self.missing,
            "drives": [d.as_dict() for d in self.drives],
        }


def destinations(node_ids, exit: str, option: dict | None = None) -> dict:
    """node id → inside/outside for this exit: an RMA always leaves; otherwise the node's latest
    disposition plan decides, and a node no plan covers is treated as leaving."""
    if exit == RMA:
        return {nid: OUTSIDE for nid in node_ids}
    if option is None:
        option = latest_dispositions(node_ids)
    return {nid: INSIDE if option.get(nid) in INSIDE_OPTIONS else OUTSIDE for nid in node_ids}


def latest_dispositions(node_ids) -> dict:
    """node id → the option of the latest disposition plan that covers it. Read through the
    node's reverse relation so that fleet does not import the planning app."""
    option: dict = {}
    for node_id, opt in (
        Node.objects.filter(pk__in=node_ids, disposition_assignments__isnull=False)
        .order_by("disposition_assignments__plan__created_at", "disposition_assignments__plan_id")
        .values_list("pk", "disposition_assignments__option")
    ):
        option[node_id] = opt  # the latest plan wins
    return option


def gate_status(node_ids, exit: str) -> dict:
    """node id → GateStatus for `exit` (rma, retire, dispose, custody)."""
    return gate_statuses(node_ids, (exit,))[exit]


def gate_statuses(node_ids, exits) -> dict:
    """exit → node id → GateStatus, for several exits at once, in five queries (six when a
    reported drive is not on its node, seven with an RMA) whatever the number of nodes."""
    node_ids = list(node_ids)
    inventories = {i.node_id: i for i in NodeDriveInventory.objects.filter(node_id__in=node_ids)}
    rows = list(Drive.objects.filter(node_id__in=node_ids).order_by("serial"))
    by_node: dict = {}
    for d in rows:
        by_node.setdefault(d.node_id, {})[d.serial] = d
    strays = {
        d.get("serial")
        for nid, i in inventories.items()
        for d in (i.drives or [])
        if d.get("serial") not in by_node.get(nid, {})
    }
    elsewhere = (
        dict(
            Drive.objects.filter(serial__in=strays)
            .exclude(node_id__in=node_ids)
            .values_list("serial", "node__hostname")
        )
        if strays
        else {}
    )
    exit_started, last_use = {}, {}
    for nid, started, used in (
        NodeEvent.objects.filter(node_id__in=node_ids)
        .values("node_id")
        .annotate(
            started=Max("at", filter=Q(to_state__in=EXIT_PATH_STATES) & ~Q(from_state__in=EXIT_PATH_STATES)),
            used=Max("at", filter=Q(from_state=L.ACTIVE) & ~Q(to_state=L.ACTIVE)),
        )
        .values_list("node_id", "started", "used")
    ):
        exit_started[nid], last_use[nid] = started, used
    records: dict = {}
    for record in SanitizationRecord.objects.filter(drive__node_id__in=node_ids, verified=True).order_by(
        "performed_at", "id"
    ):
        records.setdefault(record.drive_id, []).append(record)
    options = latest_dispositions(node_ids) if any(e != RMA for e in exits) else {}
    shipments: dict = {}
    if RMA in exits:
        for t in CustodyTransfer.objects.filter(node_id__in=node_ids, kind=CustodyKind.RMA_SHIPMENT).order_by(
            "at", "id"
        ):
            shipments[t.node_id] = t  # the latest shipment record wins
    return {
        exit: _statuses(
            node_ids,
            exit,
            destinations(node_ids, exit, options),
            inventories,
            by_node,
            elsewhere,
            exit_started,
            last_use,
            records,
            shipments if exit == RMA else {},
        )
        for exit in exits
    }


def _statuses(
    node_ids, exit, dest, inventories, by_node, elsewhere, exit_started, last_use, records, shipments
) -> dict:
    out = {}
    for nid in node_ids:
        status = GateStatus(exit=exit, destination=dest[nid], inventory_reported_at=None)
        out[nid] = status
        inventory = inventories.get(nid)
        mine = by_node.get(nid, {})
        not_before = max([t for t in (exit_started.get(nid), last_use.get(nid)) if t], default=None)
        if inventory is None:
            status.problems.append(
                "no drive inventory from the node agent: boot the node with its agent running "
                "so it reports the drives it sees, then retry"
            )
            reported = {}
        else:
            status.inventory_reported_at = inventory.reported_at
            reported = {d.get("serial"): d for d in (inventory.drives or []) if d.get("serial")}
            if not_before is not None and inventory.reported_at < not_before:
                status.problems.append(
                    f"the agent's drive inventory ({inventory.reported_at:%Y-%m-%d %H:%M} UTC) predates the node "
                    f"leaving service ({not_before:%Y-%m-%d %H:%M} UTC): let the agent report again, then retry"
                )
        for serial in sorted(set(reported) - set(mine)):
            where = f"registered to {elsewhere[serial]}" if serial in elsewhere else "no Drive record"
            status.problems.append(
                f"the agent reports drive {serial} but the records disagree ({where}): "
                "reconcile the drive records with what the agent found"
            )
        shipment = shipments.get(nid)
        declared = {}
        if shipment is not None and (not_before is None or shipment.at >= not_before):
            declared = {
                str(d.get("serial")): str(d.get("status") or "").strip()
                for d in (shipment.drive_status or [])
                if isinstance(d, dict)
            }
        serials = sorted(set(reported) | set(mine))
        ship_ok = (
            bool(shipment)
            and bool(declared)
            and bool(shipment.carrier.strip())
            and all(declared.get(s) for s in serials)
        )
        status.shipped_aboard = ship_ok
        for serial in serials:
            drive = mine.get(serial)
            info = reported.get(serial, {})
            sed = bool(drive.self_encrypting if drive else info.get("self_encrypting"))
            purgeable = bool(drive.purge_supported if drive else info.get("purge_supported"))
            required = required_method(destination=dest[nid], self_encrypting=sed, purge_supported=purgeable)
            model = drive.model if drive else str(info.get("model", ""))
            counting = None
            if drive is not None:
                for record in reversed(records.get(drive.pk, [])):
                    if (
                        record.evidence.strip()
                        and METHOD_RANK[record.method] >= METHOD_RANK[required]
                        and (last_use.get(nid) is None or record.performed_at >= last_use[nid])
                    ):
                        counting = record
                        break
            problem = ""
            if drive is not None and drive.missing_since is not None and counting is None:
                problem = (
                    f"drive {serial} is missing from the agent's inventory since "
                    f"{drive.missing_since:%Y-%m-%d %H:%M} UTC: find it, or record its destruction with evidence"
                )
            elif counting is None and not ship_ok:
                problem = (
                    f"drive {serial} needs a verified {required} record with evidence"
                    f"{' made after its last tenant use' if last_use.get(nid) else ''}"
                )
            status.drives.append(
                DriveLine(
                    serial=serial,
                    drive_id=str(drive.pk) if drive else None,
                    model=model,
                    required=required,
                    record_id=str(counting.pk) if counting else None,
                    record_method=counting.method if counting else None,
                    ok=not problem,
                    problem=problem,
                )
            )
        if shipment is not None and not ship_ok and any(not d.ok for d in status.drives):
            status.problems.append(
                "the RMA shipment record must name the carrier and declare the status of every "
                f"drive the agent reported ({', '.join(serials) or 'none'})"
            )
    return out
