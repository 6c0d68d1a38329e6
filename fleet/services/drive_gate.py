"""The drive gate: the one check every exit from custody passes.

An exit is `rma` (the node ships to a vendor), `retire`, `dispose` or a chain-of-custody
transfer. `fleet.services.lifecycle.transition()` runs this gate for every move into `rma`,
`retired` or `disposed`, so the console, the admin, the API and the automatic loops all meet the
same refusal; `record_custody_transfer` runs it for transfers.

What the gate asks, per node (NIST SP 800-88 Rev. 1):
- the agent's drive inventory exists, was taken after the node last served a tenant and
  after its last burn-in or decommissioning entry, and agrees with the Drive rows
  (every reported drive has a row on this node; no row is flagged missing);
- every drive has a counting sanitisation record: verified, with evidence, made after the
  last tenant use, by a method at least as strong as where the hardware goes needs;
- an RMA whose drives must ship with the node may instead carry an `rma_shipment` custody
  record naming the carrier and declaring every inventoried drive's status.

Where the hardware goes is decided by the custody transfers actually made (each stores the
method its destination kind needs, core/reference/sanitisation.csv) and by the transfer being
made; until one says otherwise the node is treated as leaving the organisation, and an RMA always
leaves it. Every disposition plan that ever covered the node counts too, but only upwards: the
strongest of all of them wins, so a plan (which anyone with plan rights can change) can raise the
requirement and never lower it.

Reads only (a fixed number of queries for any number of nodes); it imports no service so
that the lifecycle can call it.
"""

from dataclasses import dataclass, field

from django.db.models import Max, Q

from core.reference_data import SanitisationRule, sanitisation_rules
from fleet.choices import CustodyDestination, CustodyKind, DispositionOption, SanitizationMethod
from fleet.choices import Lifecycle as L
from fleet.models import CustodyTransfer, Drive, Node, NodeDriveInventory, NodeEvent, SanitizationRecord

RMA, RETIRE, DISPOSE, CUSTODY = "rma", "retire", "dispose", "custody"
EXIT_OF_STATE = {L.RMA: RMA, L.RETIRED: RETIRE, L.DISPOSED: DISPOSE}
INSIDE, OUTSIDE = "inside", "outside"
# Where each disposition option means the hardware goes: redeploying and leasing keep it on the
# organisation's site (a lease as a cheaper SKU in our own halls); selling hands it to a buyer,
# recycling to a recycler. A custody transfer to a lessee's premises is a transfer of its own.
PLAN_DESTINATION = {
    DispositionOption.REDEPLOY: CustodyDestination.OWN_SITE,
    DispositionOption.LEASE: CustodyDestination.OWN_SITE,
    DispositionOption.RESALE: CustodyDestination.BUYER,
    DispositionOption.RECYCLE: CustodyDestination.RECYCLER,
}
METHOD_RANK = {SanitizationMethod.CLEAR: 1, SanitizationMethod.PURGE: 2, SanitizationMethod.DESTROY: 3}
# The inventory must be newer than the node's last tenant use and than its last entry into one
# of these: burn-in (hardware may have changed in repair or RMA) and decommissioning (the way
# out starts; the agent counts again while the drives are sanitised).
EXIT_PATH_STATES = (L.BURN_IN, L.DECOMMISSIONING)


def rule_for(kind: str) -> SanitisationRule:
    """The NIST SP 800-88 rule of a destination kind (sanitisation.csv)."""
    try:
        return sanitisation_rules()[kind]
    except KeyError:
        raise ValueError(f"no sanitisation rule for destination kind {kind!r}") from None


def method_for(rule: SanitisationRule, *, self_encrypting: bool, purge_supported: bool) -> str:
    """The weakest method that will do for one drive going to `rule`'s destination: the rule's
    minimum, or its method for a drive that cannot be purged in place."""
    if rule.minimum_method == SanitizationMethod.PURGE and not (self_encrypting or purge_supported):
        return rule.unpurgeable_method
    return rule.minimum_method


def strongest(methods) -> str:
    return max(methods, key=METHOD_RANK.__getitem__)


def transfer_kind(transfer: CustodyTransfer) -> str:
    """A transfer's destination kind; an RMA shipment recorded before kinds were named went to
    its vendor."""
    if transfer.kind == CustodyKind.RMA_SHIPMENT and transfer.destination_kind == CustodyDestination.UNSPECIFIED:
        return CustodyDestination.RMA_VENDOR
    return transfer.destination_kind


@dataclass(frozen=True)
class Basis:
    """One fact that decides where the hardware goes, and so its drives' method."""

    source: str  # transfer, pending (the transfer being made), plan, default, rma
    kind: str  # a destination kind (sanitisation.csv)
    text: str
    transfer_id: str | None = None
    purpose: str = ""  # a transfer's kind: disposal, or an RMA shipment with the drives aboard

    @property
    def rule(self) -> SanitisationRule:
        return rule_for(self.kind)

    def as_dict(self) -> dict:
        rule = self.rule
        return {
            "source": self.source,
            "destination_kind": self.kind,
            "leaves_organisation": rule.leaves_organisation,
            "minimum_method": rule.minimum_method,
            "transfer_id": self.transfer_id,
            "purpose": self.purpose,
            "text": self.text,
        }


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
    basis: list[Basis] = field(default_factory=list)  # why the destination is what it is

    @property
    def missing(self) -> list[str]:
        return self.problems + [d.problem for d in self.drives if not d.ok]

    @property
    def passed(self) -> bool:
        return not self.missing

    @property
    def disposal_transfers(self) -> list[Basis]:
        """The custody transfers since the node's last tenant use that handed it on for good (not
        an RMA shipment with the drives aboard)."""
        return [b for b in self.basis if b.source == "transfer" and b.purpose == CustodyKind.DISPOSAL]

    @property
    def lacking(self) -> list[DriveLine]:
        """The drives without a record strong enough for where the hardware goes."""
        return [d for d in self.drives if not d.ok]

    def refusal(self) -> str:
        """One sentence naming every drive that lacks its record (and the other problems)."""
        parts = list(self.problems)
        by_method: dict[str, list[str]] = {}
        for d in self.lacking:
            by_method.setdefault(d.required, []).append(d.serial)
        for method, serials in sorted(by_method.items(), key=lambda kv: METHOD_RANK[kv[0]]):
            wanted = "purge or destroy" if method == SanitizationMethod.PURGE else method
            parts.append(f"{len(serials)} drive(s) lack a verified {wanted} record with evidence: {', '.join(serials)}")
        return "; ".join(parts)

    def as_dict(self) -> dict:
        return {
            "exit": self.exit,
            "destination": self.destination,
            "basis": [b.as_dict() for b in self.basis],
            "inventory_reported_at": self.inventory_reported_at.isoformat() if self.inventory_reported_at else None,
            "passed": self.passed,
            "shipped_aboard": self.shipped_aboard,
            "missing": self.missing,
            "lacking_drives": [d.serial for d in self.lacking],
            "drives": [d.as_dict() for d in self.drives],
        }


def plan_options(node_ids) -> dict:
    """node id → [(plan name, option)] of every disposition plan that covers it, oldest first.
    Read through the node's reverse relation so that fleet does not import the planning app."""
    options: dict = {}
    for node_id, name, opt in (
        Node.objects.filter(pk__in=node_ids, disposition_assignments__isnull=False)
        .order_by("disposition_assignments__plan__created_at", "disposition_assignments__plan_id")
        .values_list("pk", "disposition_assignments__plan__name", "disposition_assignments__option")
    ):
        options.setdefault(node_id, []).append((name, opt))
    return options


def _transfer_text(t: CustodyTransfer) -> str:
    rule = rule_for(transfer_kind(t))
    where = "leaves the organisation's control" if rule.leaves_organisation else "stays inside the organisation"
    return f"custody transfer to {t.to_party} ({rule.label}, {t.document_ref}) on {t.at:%Y-%m-%d}: {where}"


def _basis(exit, transfers, plans, pending: Basis | None) -> list[Basis]:
    """Every fact that decides where one node's hardware goes for this exit."""
    found = [Basis("transfer", transfer_kind(t), _transfer_text(t), str(t.pk), t.kind) for t in transfers]
    if exit == RMA:
        found.insert(0, Basis("rma", CustodyDestination.RMA_VENDOR, "an RMA ships the node to its vendor"))
        return found
    if pending is not None:
        found.append(pending)
    seen = set()
    for name, option in plans:
        if (name, option) in seen:
            continue
        seen.add((name, option))
        kind = PLAN_DESTINATION[option]
        found.append(Basis("plan", kind, f"disposition plan {name!r} says {option} ({rule_for(kind).label})"))
    if not any(b.source in ("transfer", "pending") for b in found):
        found.append(
            Basis(
                "default",
                CustodyDestination.UNSPECIFIED,
                "no custody transfer says where it goes yet: treated as leaving the organisation "
                "(a transfer to an own site or lab is what lets clear suffice)",
            )
        )
    return found


def gate_status(node_ids, exit: str, pending: dict | None = None) -> dict:
    """node id → GateStatus for `exit` (rma, retire, dispose, custody). `pending`: node id →
    the Basis of a custody transfer being made (the custody exit)."""
    return gate_statuses(node_ids, (exit,), pending)[exit]


def gate_statuses(node_ids, exits, pending: dict | None = None) -> dict:
    """exit → node id → GateStatus, for several exits at once, in seven queries (eight when a
    reported drive is not on its node) whatever the number of nodes."""
    node_ids = list(node_ids)
    pending = pending or {}
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
    # The transfers that carried the data of the node's last tenant: those recorded since then.
    transfers: dict = {}
    shipments: dict = {}
    for t in CustodyTransfer.objects.filter(node_id__in=node_ids).order_by("at", "id"):
        if last_use.get(t.node_id) is None or t.created_at >= last_use[t.node_id]:
            transfers.setdefault(t.node_id, []).append(t)
        if t.kind == CustodyKind.RMA_SHIPMENT:
            shipments[t.node_id] = t  # the latest shipment record wins
    plans = plan_options(node_ids) if any(e != RMA for e in exits) else {}
    context = (inventories, by_node, elsewhere, exit_started, last_use, records)
    return {
        exit: {
            nid: _status(
                nid,
                exit,
                _basis(exit, transfers.get(nid, []), plans.get(nid, []), pending.get(nid)),
                shipments.get(nid) if exit == RMA else None,
                *context,
            )
            for nid in node_ids
        }
        for exit in exits
    }


def counting_record(candidates, required: str, not_before):
    """The newest verified record with evidence, strong enough and made after `not_before`."""
    for record in reversed(candidates):
        if (
            record.evidence.strip()
            and METHOD_RANK[record.method] >= METHOD_RANK[required]
            and (not_before is None or record.performed_at >= not_before)
        ):
            return record
    return None


def _status(nid, exit, basis, shipment, inventories, by_node, elsewhere, exit_started, last_use, records) -> GateStatus:
    leaves = any(b.rule.leaves_organisation for b in basis)
    status = GateStatus(exit=exit, destination=OUTSIDE if leaves else INSIDE, inventory_reported_at=None, basis=basis)
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
    declared = {}
    if shipment is not None and (not_before is None or shipment.at >= not_before):
        declared = {
            str(d.get("serial")): str(d.get("status") or "").strip()
            for d in (shipment.drive_status or [])
            if isinstance(d, dict)
        }
    serials = sorted(set(reported) | set(mine))
    ship_ok = (
        bool(shipment) and bool(declared) and bool(shipment.carrier.strip()) and all(declared.get(s) for s in serials)
    )
    status.shipped_aboard = ship_ok
    for serial in serials:
        drive = mine.get(serial)
        info = reported.get(serial, {})
        sed = bool(drive.self_encrypting if drive else info.get("self_encrypting"))
        purgeable = bool(drive.purge_supported if drive else info.get("purge_supported"))
        required = strongest(method_for(b.rule, self_encrypting=sed, purge_supported=purgeable) for b in basis)
        model = drive.model if drive else str(info.get("model", ""))
        counting = counting_record(records.get(drive.pk, []), required, last_use.get(nid)) if drive else None
        problem = ""
        if drive is not None and drive.missing_since is not None and counting is None:
            problem = (
                f"drive {serial} is missing from the agent's inventory since "
                f"{drive.missing_since:%Y-%m-%d %H:%M} UTC: find it, or record its destruction with evidence"
            )
        elif counting is None and not ship_ok:
            wanted = "purge or destroy" if required == SanitizationMethod.PURGE else required
            problem = (
                f"drive {serial} needs a verified {wanted} record with evidence"
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
    return status
