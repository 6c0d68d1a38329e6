"""The planner's shared half: parse the workbook, load what its keys name from the database in
chunks, and record errors and updates."""

from collections import defaultdict
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db.models import Sum
from django.db.models.functions import Lower

from fleet.choices import Lifecycle
from fleet.inventory_files import SHEETS, Workbook
from fleet.models import (
    GPU,
    Drive,
    FabricDomain,
    Hall,
    Node,
    NodeType,
    PowerFeed,
    Rack,
    hardware_change_refusals,
)

from .columns import SHEET_NOUNS, SPECS, ImportPlan, PlannedRow, RowError, echo_value, in_chunks, is_blank, plain_value


class PlannerBase:
    """Reading the workbook and the database, and the checks every sheet shares; the sheets' own
    checks are in `sheets.Planner`."""

    def __init__(self, workbook: Workbook, *, allow_updates: set[str], lock: bool, expected: dict | None = None):
        self.book = workbook
        self.allow_updates = allow_updates
        self.lock = lock
        self.expected = expected  # the preview's ImportPlan.snapshot(), at confirm
        self.plan = ImportPlan()
        self.parsed: dict[str, list[tuple[int, dict, dict]]] = {}  # sheet -> (row, values, raw)
        self.reported: set[tuple[str, int, str]] = set()

    def error(self, sheet: str, row: int, column: str, value, message: str) -> None:
        self.reported.add((sheet, row, column))
        self.plan.errors.append(RowError(sheet, row, column, echo_value(value) if not is_blank(value) else "", message))

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
                if len(cells) > len(headers) and any(not is_blank(c) for c in cells[len(headers) :]):
                    self.error(name, number, "", None, "the row has more cells than the header has columns.")
                for header, cell in zip(headers, cells):
                    if not header:
                        continue
                    column = known[header]
                    raw[header] = cell
                    if is_blank(cell):
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
        for chunk in in_chunks(sorted(rack_names)):
            for rack in rack_qs.filter(name__in=chunk):
                self.db_racks[rack.name].append(rack)
        rack_ids = [r.pk for racks in self.db_racks.values() for r in racks]
        self.rack_occupants: dict = defaultdict(list)  # rack id -> [(node id, hostname, u, height, kw)]
        for chunk in in_chunks(rack_ids):
            for node in Node.objects.filter(rack_id__in=chunk).values_list(
                "pk", "hostname", "rack_id", "u_position", "node_type__u_height", "node_type__node_kw"
            ):
                self.rack_occupants[node[2]].append((node[0], node[1], node[3], node[4], node[5]))
        # what each touched rack's weakest feed carries, and each hall's nameplate load: new nodes
        # are checked against both (placement_errors), with what earlier rows of the file add
        self.feed_kw: dict = {}
        for chunk in in_chunks(rack_ids):
            for feed in PowerFeed.objects.filter(rack_id__in=chunk).only(
                "rack_id", "voltage", "amperage", "three_phase", "max_utilization_pct"
            ):
                kw = feed.available_kw
                self.feed_kw[feed.rack_id] = min(kw, self.feed_kw.get(feed.rack_id, kw))
        self.hall_load: dict = defaultdict(Decimal)
        for hall_id, kw in (
            Node.objects.filter(rack__hall_id__in=[h.pk for hs in self.halls.values() for h in hs])
            .values("rack__hall_id")
            .annotate(kw=Sum("node_type__node_kw"))
            .values_list("rack__hall_id", "kw")
        ):
            self.hall_load[hall_id] = Decimal(kw or 0)
        self.hall_added: dict = defaultdict(Decimal)
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
        # Hostnames are DNS names: one node per name whatever its letter case (the database's
        # fleet_node_hostname_ci_unique), so they are looked up, and keyed here, in lower case.
        self.db_nodes: dict[str, Node] = {}
        for chunk in in_chunks(sorted({h.lower() for h in hostnames})):
            node_qs = Node.objects.select_related("node_type", "rack", "fabric_domain")
            if self.lock:  # the rows an update writes stay as this plan read them until it commits
                node_qs = node_qs.select_for_update(of=("self",))
            for node in node_qs.alias(hostname_lower=Lower("hostname")).filter(hostname_lower__in=chunk):
                self.db_nodes[node.hostname.lower()] = node
        # where each existing node draws from before the file changes it: (hall, kW, rack)
        self.origin = {n.pk: (n.rack.hall_id, n.node_type.node_kw, n.rack_id) for n in self.db_nodes.values()}
        node_ids = [n.pk for n in self.db_nodes.values()]
        self.allocated_ids = set()
        self.db_gpu_slots = set()
        for chunk in in_chunks(node_ids):
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
        # GPUs and drives are evidence on a node that is allocated or has served since its last
        # sanitisation: the import adds none to such a node (the rule of GPU.clean and Drive.clean)
        owners = {v.get("node", "").lower() for s in ("gpus", "drives") for _, v, _ in rows.get(s, [])} - {""}
        self.hardware_refusals = hardware_change_refusals([self.db_nodes[h] for h in owners if h in self.db_nodes])

        serials = sorted({v.get("serial") for _, v, _ in rows.get("nodes", [])} - {None})
        self.db_node_serials = {}
        for chunk in in_chunks(serials):
            self.db_node_serials.update(dict(Node.objects.filter(serial__in=chunk).values_list("serial", "hostname")))
        tags = sorted({v.get("asset_tag") for _, v, _ in rows.get("nodes", [])} - {None})
        self.db_node_asset_tags = {}
        for chunk in in_chunks(tags):
            self.db_node_asset_tags.update(
                dict(Node.objects.filter(asset_tag__in=chunk).values_list("asset_tag", "hostname"))
            )
        addresses = sorted(
            {v.get(c) for _, v, _ in rows.get("nodes", []) for c in ("management_address", "data_address")} - {None}
        )
        self.db_node_addresses = {}
        for chunk in in_chunks(addresses):
            for column in ("management_address", "data_address"):
                self.db_node_addresses.update(
                    dict(Node.objects.filter(**{f"{column}__in": chunk}).values_list(column, "hostname"))
                )
        uuids = sorted({v.get("uuid") for _, v, _ in rows.get("gpus", [])} - {None})
        self.db_gpu_uuids = {}
        for chunk in in_chunks(uuids):
            self.db_gpu_uuids.update(dict(GPU.objects.filter(uuid__in=chunk).values_list("uuid", "node__hostname")))
        drive_serials = sorted({v.get("serial") for _, v, _ in rows.get("drives", [])} - {None})
        self.db_drive_serials = {}
        for chunk in in_chunks(drive_serials):
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

    def missing(self, sheet: str, number: int, values: dict, *, key_only: bool = False) -> bool:
        """Required cells are required: each empty one is an error naming its row and column (a
        cell that did not parse has its own error already), and the row goes no further. For an
        update (`key_only`) only the key is, since an empty cell there keeps the stored value."""
        key, columns = SPECS[sheet]
        absent = [
            c.name
            for c in columns
            if c.required
            and (not key_only or c.name == key)
            and c.attr not in values
            and (sheet, number, c.name) not in self.reported
        ]
        for column in absent:
            self.error(
                sheet,
                number,
                column,
                None,
                f"required: the row has no {column}, so it names no {SHEET_NOUNS[sheet]}."
                if column == key
                else f"required: this cell is empty; a new {SHEET_NOUNS[sheet]} needs its {column}.",
            )
        return bool(absent)

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

    def stored_values(self, sheet: str, instance) -> dict:
        """The row's columns as the database holds them now, in the form the preview shows."""
        return {c.name: plain_value(getattr(instance, c.attr)) for c in SPECS[sheet][1]}

    def stale(self, sheet: str, number: int, key: str, stored: dict | None) -> bool:
        """At confirm: whether this row's stored values differ from what the preview found (a
        colleague's change since). Such a row is refused, never overwritten with the file's value."""
        if self.expected is None:
            return False
        at_preview = self.expected.get(sheet, {}).get(key)
        noun = SHEET_NOUNS[sheet]
        again = "Nothing was imported; upload the file again to see the current diff."
        if at_preview == stored:
            return False
        if at_preview is None:
            self.error(
                sheet,
                number,
                SPECS[sheet][0],
                key,
                f"{noun} {key} was created by someone else since the preview. {again}",
            )
            return True
        if stored is None:
            self.error(
                sheet, number, SPECS[sheet][0], key, f"{noun} {key} was removed or renamed since the preview. {again}"
            )
            return True
        changed = [c for c in stored if stored[c] != at_preview.get(c)]
        self.error(
            sheet,
            number,
            changed[0],
            None,
            f"{noun} {key} was changed since the preview: "
            + "; ".join(f"{c} was {at_preview.get(c)!r}, is now {stored[c]!r}" for c in changed)
            + f". The import would overwrite that change. {again}",
        )
        return True

    def _update(self, sheet, number, key, instance, values, raw, *, exclude, check) -> None:
        """Apply `values` to `instance` in memory; plan the update if it is valid (`check` records
        its own errors and answers whether the changed row is acceptable)."""
        stored = self.stored_values(sheet, instance)
        if self.stale(sheet, number, key, stored):
            return
        diff = {}
        for attr, value in values.items():
            before = getattr(instance, attr)
            if before != value:
                diff[attr] = (plain_value(before), plain_value(value))
                setattr(instance, attr, value)
        if not self._field_errors(sheet, number, instance, raw, exclude=exclude | {"id"}):
            return
        if diff and not check(number, instance):
            return
        if diff:
            self.plan.updates.append((instance, sorted(diff), diff))
        self.plan.rows.append(PlannedRow(sheet, number, key, "update" if diff else "unchanged", diff, stored))
