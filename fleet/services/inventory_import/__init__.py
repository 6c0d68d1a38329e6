"""Bulk inventory import: racks, nodes, GPUs and drives from one workbook, all or nothing.

`plan_import()` reads the database and the file and answers what would happen: every problem
in every row (row, column, value, what to do), and for each valid row whether it creates a
row or updates one (with the field diff). `apply_import()` plans again inside one transaction,
with the racks it touches locked, and writes only if that plan is clean; so a file previewed
clean but made invalid meanwhile (someone took a U position) is refused whole, never
half-applied.

Rules:
- create-only unless updates are allowed for that sheet; an existing key is then an error;
- a key twice in one file is an error on every later row;
- an empty cell in an update leaves the stored value as it is (the diff shows what changes);
- lifecycle, health, cordon and the like are not columns: only the state machine moves them;
- a node that carries an allocation keeps its rack, U position, type and fabric;
- GPUs and drives are added with their node (by hostname), never moved or updated here;
- every new node gets its `enrol` event, and every write its audit row.
"""

import datetime
import json
import os
import secrets
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.context import current_request_id
from core.services.audit import AuditEntry, record_audits
from fleet.choices import Cooling, DriveInterface, Lifecycle
from fleet.inventory_files import SHEETS, Sheet, Workbook
from fleet.models import (
    GPU,
    Drive,
    FabricDomain,
    Hall,
    Node,
    NodeEvent,
    NodeType,
    Rack,
    placement_errors,
    rack_errors_for_nodes,
)

MAX_VALUE_ECHO = 60
CHUNK = 2000


class ImportRejected(Exception):
    """The file (or the inventory under it) does not allow the import; `plan.errors` says why."""

    def __init__(self, plan: "ImportPlan"):
        self.plan = plan
        super().__init__(f"{len(plan.errors)} problem(s); nothing was imported")


@dataclass(frozen=True)
class RowError:
    sheet: str
    row: int  # spreadsheet row number (the header is row 1); 0 for the file as a whole
    column: str
    value: str
    message: str

    def __str__(self) -> str:
        where = f"{self.sheet} row {self.row}" if self.row else (self.sheet or "file")
        if self.column:
            where += f", column {self.column}"
        if self.value:
            where += f", value {self.value}"
        return f"{where}: {self.message}"


@dataclass
class PlannedRow:
    sheet: str
    row: int
    key: str
    action: str  # "create" | "update" | "unchanged"
    diff: dict = field(default_factory=dict)  # field -> (before, after), for updates


@dataclass
class ImportPlan:
    errors: list[RowError] = field(default_factory=list)
    rows: list[PlannedRow] = field(default_factory=list)
    new_racks: list[Rack] = field(default_factory=list)
    new_nodes: list[Node] = field(default_factory=list)
    new_gpus: list[GPU] = field(default_factory=list)
    new_drives: list[Drive] = field(default_factory=list)
    updates: list[tuple[object, list[str], dict]] = field(default_factory=list)  # (instance, fields, diff)

    @property
    def ok(self) -> bool:
        return not self.errors

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for row in self.rows:
            out.setdefault(row.sheet, {"create": 0, "update": 0, "unchanged": 0})[row.action] += 1
        return out

    def sheets_with(self, action: str) -> set[str]:
        return {row.sheet for row in self.rows if row.action == action}


# ---- columns ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str
    parse: Callable
    required: bool = False
    attribute: str = ""  # model attribute when it differs from the column name

    @property
    def attr(self) -> str:
        return self.attribute or self.name


def _text(value) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def _int(value) -> int:
    if isinstance(value, bool):
        raise ValueError("is not a whole number")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():
            raise ValueError("is not a whole number")
        number = int(value)
    else:
        text = str(value).strip()
        try:
            number = int(Decimal(text)) if Decimal(text) == Decimal(text).to_integral_value() else None
        except InvalidOperation:
            number = None
        if number is None:
            raise ValueError("is not a whole number")
    if number < 0 or number > 32767:
        raise ValueError("must be between 0 and 32767")
    return number


def _decimal(value) -> Decimal:
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError("is not a number (write e.g. 40 or 40.5, without units)") from None
    if not number.is_finite():
        raise ValueError("is not a finite number")
    if number < 0:
        raise ValueError("cannot be negative")
    return number


def _date(value) -> datetime.date:
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(str(value).strip())
    except ValueError:
        raise ValueError("is not a date; write it as YYYY-MM-DD") from None


_TRUE, _FALSE = {"true", "yes", "y", "1"}, {"false", "no", "n", "0"}


def _bool(value) -> bool:
    if isinstance(value, bool):
        return value
    text = _text(value).lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("is not yes/no (write true or false)")


def _choice(choices) -> Callable:
    def parse(value):
        text = _text(value).lower()
        if text in choices.values:
            return text
        for choice_value, label in choices.choices:
            if text == str(label).lower():
                return choice_value
        raise ValueError(f"is not one of {', '.join(choices.values)}")

    return parse


SPECS: dict[str, tuple[str, list[Column]]] = {
    "racks": (
        "name",
        [
            Column("name", _text, True),
            Column("hall", _text, True),
            Column("row", _int),
            Column("column", _int),
            Column("u_height", _int),
            Column("rated_power_kw", _decimal, True),
            Column("cooling", _choice(Cooling)),
            Column("cooling_capacity_kw", _decimal, True),
        ],
    ),
    "nodes": (
        "hostname",
        [
            Column("hostname", _text, True),
            Column("serial", _text, True),
            Column("rack", _text, True),
            Column("u_position", _int, True),
            Column("node_type", _text, True),
            Column("fabric_domain", _text),
            Column("leaf_switch", _text),
            Column("bmc_address", _text),
            Column("bmc_mac", _text),
            Column("commissioned_on", _date),
        ],
    ),
    "gpus": (
        "uuid",
        [
            Column("node", _text, True),
            Column("index", _int, True),
            Column("uuid", _text, True),
            Column("serial", _text),
        ],
    ),
    "drives": (
        "serial",
        [
            Column("node", _text, True),
            Column("serial", _text, True),
            Column("model", _text, True),
            Column("capacity_gb", _int, True),
            Column("interface", _choice(DriveInterface)),
            Column("self_encrypting", _bool),
        ],
    ),
}
REFERENCE_COLUMNS = {"hall", "rack", "node_type", "fabric_domain", "node"}
UPDATABLE = {"racks", "nodes"}
MODEL_OF_SHEET = {"racks": Rack, "nodes": Node, "gpus": GPU, "drives": Drive}


def columns_of(sheet: str) -> list[str]:
    return [c.name for c in SPECS[sheet][1]]


def _echo(value) -> str:
    text = "" if value is None else str(value)
    return repr(text if len(text) <= MAX_VALUE_ECHO else text[:MAX_VALUE_ECHO] + "…")


def _blank(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _chunks(values: list, size: int = CHUNK):
    for start in range(0, len(values), size):
        yield values[start : start + size]


# ---- planning --------------------------------------------------------------------------------


class _Planner:
    def __init__(self, workbook: Workbook, *, allow_updates: set[str], lock: bool):
        self.book = workbook
        self.allow_updates = allow_updates
        self.lock = lock
        self.plan = ImportPlan()
        self.parsed: dict[str, list[tuple[int, dict, dict]]] = {}  # sheet -> (row, values, raw)
        self.reported: set[tuple[str, int, str]] = set()

    def error(self, sheet: str, row: int, column: str, value, message: str) -> None:
        self.reported.add((sheet, row, column))
        self.plan.errors.append(RowError(sheet, row, column, _echo(value) if not _blank(value) else "", message))

    # -- step 1: cells to values, column by column ---------------------------------------------
    def parse(self) -> None:
        for problem in self.book.problems:
            self.error("", 0, "", None, problem)
        for name in SHEETS:
            sheet = self.book.sheets.get(name)
            if sheet is None:
                continue
            _key, columns = SPECS[name]
            known = {c.name: c for c in columns}
            headers = sheet.headers
            bad_header = False
            for position, header in enumerate(headers, start=1):
                if header and header not in known:
                    self.error(
                        name,
                        1,
                        header,
                        header,
                        f"unknown column (column {position}); the {name} sheet takes: "
                        f"{', '.join(known)}. Remove or rename it.",
                    )
                    bad_header = True
            for column in columns:
                if column.required and column.name not in headers:
                    self.error(name, 1, column.name, None, "required column is missing from the header row.")
                    bad_header = True
            if len({h for h in headers if h}) != len([h for h in headers if h]):
                self.error(name, 1, "", None, "a column name appears twice in the header row.")
                bad_header = True
            if bad_header:
                continue
            rows = []
            for number, cells in sheet.rows:
                values, raw = {}, {}
                if len(cells) > len(headers) and any(not _blank(c) for c in cells[len(headers) :]):
                    self.error(name, number, "", None, "the row has more cells than the header has columns.")
                for header, cell in zip(headers, cells):
                    if not header:
                        continue
                    column = known[header]
                    raw[header] = cell
                    if _blank(cell):
                        continue
                    try:
                        values[column.attr] = column.parse(cell)
                    except ValueError as exc:
                        self.error(name, number, header, cell, str(exc))
                rows.append((number, values, raw))
            self.parsed[name] = rows

    # -- step 2: everything the rows refer to, a few queries in all -----------------------------
    def load(self) -> None:
        rows = self.parsed
        self.halls: dict[str, list[Hall]] = defaultdict(list)
        for hall in Hall.objects.select_related("site"):
            self.halls[hall.name].append(hall)
            self.halls[f"{hall.site.slug}/{hall.name}"].append(hall)
        self.node_types = {t.slug: t for t in NodeType.objects.all()}
        self.fabrics: dict[str, list[FabricDomain]] = defaultdict(list)
        for fabric in FabricDomain.objects.select_related("site"):
            self.fabrics[fabric.name].append(fabric)

        rack_names = {v.get("name") for _, v, _ in rows.get("racks", [])} | {
            v.get("rack") for _, v, _ in rows.get("nodes", [])
        }
        rack_names.discard(None)
        self.db_racks: dict[str, list[Rack]] = defaultdict(list)
        rack_qs = Rack.objects.select_related("hall__site")
        if self.lock:
            rack_qs = rack_qs.select_for_update()
        for chunk in _chunks(sorted(rack_names)):
            for rack in rack_qs.filter(name__in=chunk):
                self.db_racks[rack.name].append(rack)
        rack_ids = [r.pk for racks in self.db_racks.values() for r in racks]
        self.rack_occupants: dict = defaultdict(list)  # rack id -> [(node id, hostname, u, height, kw)]
        for chunk in _chunks(rack_ids):
            for node in Node.objects.filter(rack_id__in=chunk).values_list(
                "pk", "hostname", "rack_id", "u_position", "node_type__u_height", "node_type__node_kw"
            ):
                self.rack_occupants[node[2]].append((node[0], node[1], node[3], node[4], node[5]))
        hall_ids = {h.pk for hs in self.halls.values() for h in hs}
        self.grid = (
            {
                (r["hall_id"], r["row"], r["column"]): r["name"]
                for r in Rack.objects.filter(hall_id__in=hall_ids).values("hall_id", "row", "column", "name")
            }
            if rows.get("racks")
            else {}
        )

        hostnames = {v.get("hostname") for _, v, _ in rows.get("nodes", [])}
        hostnames |= {v.get("node") for s in ("gpus", "drives") for _, v, _ in rows.get(s, [])}
        hostnames.discard(None)
        self.db_nodes: dict[str, Node] = {}
        for chunk in _chunks(sorted(hostnames)):
            for node in Node.objects.select_related("node_type", "rack", "fabric_domain").filter(hostname__in=chunk):
                self.db_nodes[node.hostname] = node
        node_ids = [n.pk for n in self.db_nodes.values()]
        self.allocated_ids = set()
        self.db_gpu_slots = set()
        for chunk in _chunks(node_ids):
            self.allocated_ids |= set(
                Node.objects.filter(
                    pk__in=chunk, allocation_memberships__isnull=False, allocation_memberships__ended_at__isnull=True
                ).values_list("pk", flat=True)
            )
            self.db_gpu_slots |= set(GPU.objects.filter(node_id__in=chunk).values_list("node_id", "index"))
        self.allocated_ids |= {
            n.pk
            for n in self.db_nodes.values()
            if n.lifecycle in (Lifecycle.PROVISIONING, Lifecycle.ACTIVE, Lifecycle.RELEASING)
        }

        serials = sorted({v.get("serial") for _, v, _ in rows.get("nodes", [])} - {None})
        self.db_node_serials = {}
        for chunk in _chunks(serials):
            self.db_node_serials.update(dict(Node.objects.filter(serial__in=chunk).values_list("serial", "hostname")))
        uuids = sorted({v.get("uuid") for _, v, _ in rows.get("gpus", [])} - {None})
        self.db_gpu_uuids = {}
        for chunk in _chunks(uuids):
            self.db_gpu_uuids.update(dict(GPU.objects.filter(uuid__in=chunk).values_list("uuid", "node__hostname")))
        drive_serials = sorted({v.get("serial") for _, v, _ in rows.get("drives", [])} - {None})
        self.db_drive_serials = {}
        for chunk in _chunks(drive_serials):
            self.db_drive_serials.update(
                dict(Drive.objects.filter(serial__in=chunk).values_list("serial", "node__hostname"))
            )

    # -- step 3: each sheet, in dependency order ------------------------------------------------
    def _field_errors(self, sheet: str, number: int, instance, raw: dict, exclude: set[str]) -> bool:
        try:
            instance.clean_fields(exclude=exclude)
        except ValidationError as exc:
            for name, messages in exc.message_dict.items():
                column = name.removesuffix("_id")
                if (sheet, number, column) in self.reported:
                    continue  # the cell's own parse error already says it
                for message in messages:
                    self.error(sheet, number, column, raw.get(column), message)
            return False
        return True

    def _duplicate(self, sheet: str, seen: dict, key, number: int, column: str, raw) -> bool:
        if key in seen:
            self.error(
                sheet,
                number,
                column,
                raw,
                f"appears twice in this file (first on row {seen[key]}); each row needs its own value.",
            )
            return True
        seen[key] = number
        return False

    def _one(self, candidates: list, sheet, number, column, value, what: str):
        if not candidates:
            self.error(
                sheet, number, column, value, f"no {what} has this name; check the spelling or add the {what} first."
            )
            return None
        if len(candidates) > 1:
            self.error(
                sheet,
                number,
                column,
                value,
                f"{len(candidates)} {what}s have this name; write it as site/hall to say which."
                if what == "hall"
                else f"{len(candidates)} {what}s have this name in different places; rename one first.",
            )
            return None
        return candidates[0]

    def racks(self) -> None:
        self.file_racks: dict[str, Rack] = {}
        seen: dict = {}
        for number, values, raw in self.parsed.get("racks", []):
            name = values.get("name")
            if name is None or self._duplicate("racks", seen, name, number, "name", raw.get("name")):
                continue
            hall = (
                self._one(self.halls.get(values["hall"], []), "racks", number, "hall", raw.get("hall"), "hall")
                if "hall" in values
                else None
            )
            existing = self.db_racks.get(name, [])
            if existing:
                rack = existing[0]
                if "racks" not in self.allow_updates:
                    self.error(
                        "racks",
                        number,
                        "name",
                        raw.get("name"),
                        f"rack {name} already exists (in {rack.hall}); this import only creates. Choose "
                        "'update existing rows' to change it, or remove the row.",
                    )
                    continue
                if hall is not None and hall.pk != rack.hall_id:
                    self.error(
                        "racks",
                        number,
                        "hall",
                        raw.get("hall"),
                        f"rack {name} is in {rack.hall}; the import does not move racks between halls.",
                    )
                    continue
                self._update(
                    "racks",
                    number,
                    name,
                    rack,
                    {k: v for k, v in values.items() if k != "hall"},
                    raw,
                    exclude={"hall"},
                    check=self._rack_update_check,
                )
                self.file_racks[name] = rack
                continue
            if hall is None:
                continue
            rack = Rack(hall=hall, **{k: v for k, v in values.items() if k not in ("hall",)})
            if not self._field_errors("racks", number, rack, raw, exclude={"hall", "id"}):
                continue
            grid_key = (hall.pk, rack.row, rack.column)
            if grid_key in self.grid:
                self.error(
                    "racks",
                    number,
                    "column",
                    raw.get("column"),
                    f"{hall} already has rack {self.grid[grid_key]} at row {rack.row}, column {rack.column}.",
                )
                continue
            self.grid[grid_key] = name
            self.plan.new_racks.append(rack)
            self.plan.rows.append(PlannedRow("racks", number, name, "create"))
            self.file_racks[name] = rack

    def _rack_update_check(self, number: int, rack: Rack) -> bool:
        problems = rack_errors_for_nodes(rack, Node.objects.filter(rack=rack).select_related("node_type"))
        for problem in problems:
            self.error("racks", number, "", None, problem)
        return not problems

    def _update(self, sheet, number, key, instance, values, raw, *, exclude, check) -> None:
        """Apply `values` to `instance` in memory; plan the update if it is valid (`check` records
        its own errors and answers whether the changed row is acceptable)."""
        diff = {}
        for attr, value in values.items():
            before = getattr(instance, attr)
            if before != value:
                diff[attr] = (_plain(before), _plain(value))
                setattr(instance, attr, value)
        if not self._field_errors(sheet, number, instance, raw, exclude=exclude | {"id"}):
            return
        if diff and not check(number, instance):
            return
        if diff:
            self.plan.updates.append((instance, sorted(diff), diff))
        self.plan.rows.append(PlannedRow(sheet, number, key, "update" if diff else "unchanged", diff))

    def _rack_of(self, name: str, number: int, raw):
        if name in self.file_racks:
            return self.file_racks[name]
        return self._one(self.db_racks.get(name, []), "nodes", number, "rack", raw, "rack")

    def nodes(self) -> None:
        self.file_nodes: dict[str, Node] = {}
        placed: dict = defaultdict(list)  # rack key -> [(hostname, u, height, kw)] added by this file
        seen, seen_serials = {}, {}
        for number, values, raw in self.parsed.get("nodes", []):
            hostname = values.get("hostname")
            if hostname is None or self._duplicate("nodes", seen, hostname, number, "hostname", raw.get("hostname")):
                continue
            serial = values.get("serial")
            if serial is not None and self._duplicate(
                "nodes", seen_serials, serial, number, "serial", raw.get("serial")
            ):
                continue
            refs = {}
            if "rack" in values:
                refs["rack"] = self._rack_of(values["rack"], number, raw.get("rack"))
            if "node_type" in values:
                refs["node_type"] = self.node_types.get(values["node_type"])
                if refs["node_type"] is None:
                    self.error(
                        "nodes",
                        number,
                        "node_type",
                        raw.get("node_type"),
                        f"no node type has this slug; known types: {', '.join(sorted(self.node_types))}.",
                    )
            if "fabric_domain" in values:
                refs["fabric_domain"] = self._one(
                    self.fabrics.get(values["fabric_domain"], []),
                    "nodes",
                    number,
                    "fabric_domain",
                    raw.get("fabric_domain"),
                    "fabric domain",
                )
            plain = {k: v for k, v in values.items() if k not in REFERENCE_COLUMNS}
            existing = self.db_nodes.get(hostname)
            if existing is not None:
                if not any(v is None for v in refs.values()):
                    self._node_update(number, existing, plain, refs, raw, placed)
                continue
            node = Node(lifecycle=Lifecycle.ENROLLED, **plain)
            fields_ok = self._field_errors(
                "nodes", number, node, raw, exclude={"rack", "node_type", "fabric_domain", "id"}
            )
            if serial in self.db_node_serials:
                self.error(
                    "nodes",
                    number,
                    "serial",
                    raw.get("serial"),
                    f"serial already belongs to node {self.db_node_serials[serial]}.",
                )
                continue
            if not fields_ok or any(v is None for v in refs.values()):
                continue
            for attr, ref in refs.items():
                setattr(node, attr, ref)
            if not self._placement(number, node, placed, exclude_pk=None):
                continue
            self.plan.new_nodes.append(node)
            self.plan.rows.append(PlannedRow("nodes", number, hostname, "create"))
            self.file_nodes[hostname] = node

    def _node_update(self, number, node: Node, plain: dict, refs: dict, raw: dict, placed) -> None:
        if "nodes" not in self.allow_updates:
            self.error(
                "nodes",
                number,
                "hostname",
                raw.get("hostname"),
                f"node {node.hostname} already exists (in rack {node.rack.name}, {node.lifecycle}); this import "
                "only creates. Choose 'update existing rows' to change it, or remove the row.",
            )
            return
        serial = plain.get("serial")
        if serial is not None and self.db_node_serials.get(serial, node.hostname) != node.hostname:
            self.error(
                "nodes",
                number,
                "serial",
                raw.get("serial"),
                f"serial already belongs to node {self.db_node_serials[serial]}.",
            )
            return
        values = {**plain, **refs}
        locked = {
            "rack": "rack_id",
            "u_position": "u_position",
            "node_type": "node_type_id",
            "fabric_domain": "fabric_domain_id",
            "leaf_switch": "leaf_switch",
        }
        if node.pk in self.allocated_ids:
            moved = [
                col
                for col, attr in locked.items()
                if col in values and getattr(values[col], "pk", values[col]) != getattr(node, attr)
            ]
            if moved:
                for col in moved:
                    self.error(
                        "nodes",
                        number,
                        col,
                        raw.get(col),
                        f"{node.hostname} carries a tenant allocation; its {col} cannot change under it. "
                        "Drain it first, or leave the cell empty.",
                    )
                return
        new_type = refs.get("node_type")
        if new_type is not None and new_type.pk != node.node_type_id:
            surplus = sum(
                1 for (node_id, index) in self.db_gpu_slots if node_id == node.pk and index >= new_type.gpus_per_node
            )
            if surplus:
                self.error(
                    "nodes",
                    number,
                    "node_type",
                    raw.get("node_type"),
                    f"{node.hostname} has {surplus} GPU(s) beyond the {new_type.gpus_per_node} of {new_type.slug}.",
                )
                return

        self._update(
            "nodes",
            number,
            node.hostname,
            node,
            values,
            raw,
            exclude={"rack", "node_type", "fabric_domain"},
            check=lambda row, updated: self._placement(row, updated, placed, exclude_pk=updated.pk),
        )
        self.file_nodes[node.hostname] = node

    def _placement(self, number: int, node: Node, placed, *, exclude_pk) -> bool:
        rack = node.rack
        rack_key = rack.pk if rack.pk and not rack._state.adding else ("new", rack.name)
        occupants = (
            []
            if rack._state.adding
            else [
                (h, u, height, kw)
                for (pk, h, u, height, kw) in self.rack_occupants.get(rack.pk, [])
                if pk != exclude_pk
            ]
        )
        others = occupants + [o for o in placed[rack_key] if o[0] != node.hostname]
        problems = placement_errors(
            rack=rack,
            node_type=node.node_type,
            u_position=node.u_position,
            fabric_domain=node.fabric_domain,
            others=others,
        )
        for problem in problems:
            self.error(
                "nodes",
                number,
                "u_position" if problem.startswith("U") else "rack",
                f"{rack.name} U{node.u_position}",
                problem,
            )
        if problems:
            return False
        placed[rack_key].append((node.hostname, node.u_position, node.node_type.u_height, node.node_type.node_kw))
        return True

    def _node_of(self, sheet: str, number: int, values: dict, raw: dict):
        hostname = values.get("node")
        if hostname is None:
            return None
        node = self.file_nodes.get(hostname) or self.db_nodes.get(hostname)
        if node is None:
            rejected = any(e.sheet == "nodes" and e.value == _echo(hostname) for e in self.plan.errors)
            self.error(
                sheet,
                number,
                "node",
                raw.get("node"),
                "this node's own row has errors (see the nodes sheet)."
                if rejected
                else "no node has this hostname, in the inventory or in this file's nodes sheet.",
            )
            return None
        if node.pk in self.allocated_ids:
            self.error(
                sheet,
                number,
                "node",
                raw.get("node"),
                f"{hostname} carries a tenant allocation; its hardware is not changed under it.",
            )
            return None
        return node

    def gpus(self) -> None:
        seen, slots = {}, {}
        for number, values, raw in self.parsed.get("gpus", []):
            uuid = values.get("uuid")
            if uuid is not None and self._duplicate("gpus", seen, uuid, number, "uuid", raw.get("uuid")):
                continue
            node = self._node_of("gpus", number, values, raw)
            if node is None or "index" not in values or uuid is None:
                continue
            if uuid in self.db_gpu_uuids:
                self.error(
                    "gpus",
                    number,
                    "uuid",
                    raw.get("uuid"),
                    f"this GPU is already in the inventory, in {self.db_gpu_uuids[uuid]}; the import only adds GPUs.",
                )
                continue
            index = values["index"]
            per_node = node.node_type.gpus_per_node
            if index >= per_node:
                self.error(
                    "gpus",
                    number,
                    "index",
                    raw.get("index"),
                    f"{node.hostname} is a {node.node_type.slug} with {per_node} GPUs (indexes 0-{per_node - 1}).",
                )
                continue
            slot = (node.hostname, index)
            if (node.pk, index) in self.db_gpu_slots:
                self.error(
                    "gpus", number, "index", raw.get("index"), f"{node.hostname} already has a GPU at index {index}."
                )
                continue
            if self._duplicate("gpus", slots, slot, number, "index", raw.get("index")):
                continue
            gpu = GPU(node=node, index=index, uuid=uuid, serial=values.get("serial", ""))
            if not self._field_errors("gpus", number, gpu, raw, exclude={"node", "id"}):
                continue
            self.plan.new_gpus.append(gpu)
            self.plan.rows.append(PlannedRow("gpus", number, uuid, "create"))

    def drives(self) -> None:
        seen = {}
        for number, values, raw in self.parsed.get("drives", []):
            serial = values.get("serial")
            if serial is not None and self._duplicate("drives", seen, serial, number, "serial", raw.get("serial")):
                continue
            node = self._node_of("drives", number, values, raw)
            if node is None or serial is None:
                continue
            if serial in self.db_drive_serials:
                self.error(
                    "drives",
                    number,
                    "serial",
                    raw.get("serial"),
                    f"this drive is already in the inventory, in {self.db_drive_serials[serial]}; "
                    "the import only adds drives.",
                )
                continue
            drive = Drive(node=node, **{k: v for k, v in values.items() if k != "node"})
            if not self._field_errors("drives", number, drive, raw, exclude={"node", "id"}):
                continue
            self.plan.new_drives.append(drive)
            self.plan.rows.append(PlannedRow("drives", number, serial, "create"))

    def run(self) -> ImportPlan:
        self.parse()
        if not any(self.parsed.values()) and not self.plan.errors:
            self.error("", 0, "", None, "The file has no data rows.")
        if self.parsed:
            self.load()
            self.racks()
            self.nodes()
            self.gpus()
            self.drives()
        self.plan.errors.sort(key=lambda e: (SHEETS.index(e.sheet) if e.sheet in SHEETS else -1, e.row))
        return self.plan


def _plain(value):
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, (Decimal, datetime.date)):
        return str(value)
    return str(value)


def plan_import(workbook: Workbook, *, allow_updates: set[str] = frozenset()) -> ImportPlan:
    """What importing `workbook` would do now (reads only)."""
    return _Planner(workbook, allow_updates=set(allow_updates) & UPDATABLE, lock=False).run()


def apply_import(workbook: Workbook, *, allow_updates: set[str] = frozenset(), actor: str) -> ImportPlan:
    """Plan again under lock and write everything, or raise ImportRejected and write nothing."""
    try:
        with transaction.atomic():
            plan = _Planner(workbook, allow_updates=set(allow_updates) & UPDATABLE, lock=True).run()
            if not plan.ok:
                raise ImportRejected(plan)
            _write(plan, actor=actor)
    except IntegrityError:
        plan = ImportPlan(
            errors=[
                RowError(
                    "",
                    0,
                    "",
                    "",
                    (
                        "The inventory changed while the import ran (another user added a node, rack or serial from this file); "
                        "nothing was imported. Upload the file again to see the current problems."
                    ),
                )
            ]
        )
        raise ImportRejected(plan) from None
    return plan


def _write(plan: ImportPlan, *, actor: str) -> None:
    now = timezone.now()
    request_id = current_request_id()
    Rack.objects.bulk_create(plan.new_racks, batch_size=1000)
    audits: list[AuditEntry] = []
    events: list[NodeEvent] = []
    for instance, fields, diff in plan.updates:
        instance.save(update_fields=[*fields, "updated_at"])
        label = type(instance)._meta.model_name
        audits.append(
            AuditEntry(
                f"{label}.import_update",
                instance,
                before={k: a for k, (a, _) in diff.items()},
                after={k: b for k, (_, b) in diff.items()},
                reason="admin import",
            )
        )
        if isinstance(instance, Node):
            events.append(
                NodeEvent(
                    node_id=instance.pk,
                    at=now,
                    actor=actor,
                    action="inventory_update",
                    from_state=instance.lifecycle,
                    to_state=instance.lifecycle,
                    reason="admin import: " + ", ".join(f"{k} {a} → {b}" for k, (a, b) in diff.items()),
                    request_id=request_id,
                )
            )
    Node.objects.bulk_create(plan.new_nodes, batch_size=1000)
    GPU.objects.bulk_create(plan.new_gpus, batch_size=2000)
    Drive.objects.bulk_create(plan.new_drives, batch_size=2000)
    gpus_by_node: dict = defaultdict(list)
    for gpu in plan.new_gpus:
        gpus_by_node[gpu.node_id].append(gpu.uuid)
    drives_by_node: dict = defaultdict(list)
    for drive in plan.new_drives:
        drives_by_node[drive.node_id].append(drive.serial)
    for rack in plan.new_racks:
        audits.append(
            AuditEntry(
                "rack.import_create",
                rack,
                after={
                    "name": rack.name,
                    "hall": str(rack.hall),
                    "row": rack.row,
                    "column": rack.column,
                    "u_height": rack.u_height,
                    "rated_power_kw": str(rack.rated_power_kw),
                    "cooling": rack.cooling,
                    "cooling_capacity_kw": str(rack.cooling_capacity_kw),
                },
                reason="admin import",
            )
        )
    new_ids = set()
    for node in plan.new_nodes:
        new_ids.add(node.pk)
        events.append(
            NodeEvent(
                node_id=node.pk,
                at=now,
                actor=actor,
                action="enrol",
                from_state="",
                to_state=Lifecycle.ENROLLED,
                reason="enrolled by admin import",
                request_id=request_id,
            )
        )
        audits.append(
            AuditEntry(
                "node.import_create",
                node,
                after={
                    "hostname": node.hostname,
                    "serial": node.serial,
                    "rack": node.rack.name,
                    "u_position": node.u_position,
                    "node_type": node.node_type.slug,
                    "fabric_domain": node.fabric_domain.name if node.fabric_domain else None,
                    "bmc_address": node.bmc_address,
                    "gpus": gpus_by_node.get(node.pk, []),
                    "drives": drives_by_node.get(node.pk, []),
                },
                reason="admin import",
            )
        )
    # hardware added to nodes that were already in the inventory
    for node_id in (set(gpus_by_node) | set(drives_by_node)) - new_ids:
        node = next(g.node for g in plan.new_gpus + plan.new_drives if g.node_id == node_id)
        audits.append(
            AuditEntry(
                "node.import_hardware",
                node,
                after={"gpus": gpus_by_node.get(node_id, []), "drives": drives_by_node.get(node_id, [])},
                reason="admin import",
            )
        )
    NodeEvent.objects.bulk_create(events, batch_size=2000)
    record_audits(actor=actor, entries=audits)


# ---- the file between preview and confirm --------------------------------------------------
# The previewed bytes are kept server-side (never round-tripped through the browser) under an
# unguessable id bound to the user; confirming claims them with an atomic rename, so a double
# submit applies the import once and the second answers that it was already used.


def _staging_dir() -> Path:
    path = Path(settings.VAR_DIR) / "admin-imports"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cell_json(value):
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def stage_workbook(*, workbook: Workbook, filename: str, user_id, options: dict) -> str:
    """Keep the parsed rows (not the upload) for the confirm step: confirming re-validates
    them against the database but does not parse the spreadsheet a second time."""
    token = secrets.token_urlsafe(24)
    base = _staging_dir() / token
    sheets = {
        name: {"headers": sheet.headers, "rows": [[n, [_cell_json(c) for c in cells]] for n, cells in sheet.rows]}
        for name, sheet in workbook.sheets.items()
    }
    base.with_suffix(".data").write_text(json.dumps({"sheets": sheets}))
    base.with_suffix(".json").write_text(
        json.dumps(
            {"user": str(user_id), "filename": filename, "options": options, "staged_at": timezone.now().isoformat()}
        )
    )
    _sweep_stale()
    return token


def claim_staged(*, token: str, user_id) -> tuple[str, Workbook, dict] | None:
    """The staged rows for `token` if they are this user's and still unclaimed; gone after."""
    if not token or len(token) > 64 or not all(c.isalnum() or c in "-_" for c in token):
        return None
    base = _staging_dir() / token
    claimed = base.with_suffix(".claimed")
    try:
        meta = json.loads(base.with_suffix(".json").read_text())
        if meta["user"] != str(user_id):
            return None
        os.replace(base.with_suffix(".data"), claimed)  # atomic: only one request wins
    except (OSError, ValueError, KeyError):
        return None
    try:
        stored = json.loads(claimed.read_text())["sheets"]
        sheets = {
            name: Sheet(name, sheet["headers"], [(n, cells) for n, cells in sheet["rows"]])
            for name, sheet in stored.items()
        }
        return meta["filename"], Workbook(sheets, []), meta.get("options", {})
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        for suffix in (".claimed", ".json"):
            base.with_suffix(suffix).unlink(missing_ok=True)


STAGED_TTL_S = 6 * 3600


def _sweep_stale() -> None:
    cutoff = time.time() - STAGED_TTL_S
    for path in _staging_dir().iterdir():
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
        except OSError:
            continue


def record_enrolment(node: Node, *, actor: str, reason: str) -> NodeEvent:
    """A node added one at a time (the admin's add form) gets the same enrol event as an import."""
    return NodeEvent.objects.create(
        node=node,
        at=timezone.now(),
        actor=actor,
        action="enrol",
        from_state="",
        to_state=node.lifecycle,
        reason=reason,
        request_id=current_request_id(),
    )


def record_inventory_update(node: Node, *, actor: str, changes: dict) -> NodeEvent:
    return NodeEvent.objects.create(
        node=node,
        at=timezone.now(),
        actor=actor,
        action="inventory_update",
        from_state=node.lifecycle,
        to_state=node.lifecycle,
        reason="admin: " + ", ".join(f"{k} {a} → {b}" for k, (a, b) in changes.items()),
        request_id=current_request_id(),
    )
