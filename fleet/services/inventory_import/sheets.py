"""The planner's per-sheet checks: racks, nodes (placement, updates of allocated nodes), GPUs and
drives, and `run()` which answers the whole plan."""

from collections import defaultdict

from django.core.exceptions import ValidationError

from core.netguard import AddressRefused
from fleet.choices import Lifecycle
from fleet.inventory_files import SHEETS
from fleet.models import (
    GPU,
    Drive,
    Node,
    NodeBMC,
    Rack,
    placement_errors,
    rack_errors_for_nodes,
)
from fleet.validators import normalise_mac, validate_bmc_address, validate_mac

from ..bmc_network import check_bmc_address
from .columns import (
    BMC_COLUMNS,
    REFERENCE_COLUMNS,
    SPECS,
    ImportPlan,
    PlannedRow,
    echo_value,
    in_chunks,
    plain_value,
    sets_bmc_columns,
)
from .planner import PlannerBase


class Planner(PlannerBase):
    """Each sheet's checks, in dependency order: racks, then nodes, then their GPUs and drives."""

    def racks(self) -> None:
        self.file_racks: dict[str, Rack] = {}
        seen: dict = {}
        for number, values, raw in self.parsed.get("racks", []):
            name = values.get("name")
            if name is None:
                self.missing("racks", number, values, key_only=True)
                continue
            if self._duplicate("racks", seen, name, number, "name", raw.get("name")):
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
            if self.missing("racks", number, values) or hall is None or self.stale("racks", number, name, None):
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

    def _rack_of(self, name: str, number: int, raw):
        if name in self.file_racks:
            return self.file_racks[name]
        return self._one(self.db_racks.get(name, []), "nodes", number, "rack", raw, "rack")

    def nodes(self) -> None:
        self.file_nodes: dict[str, Node] = {}
        placed: dict = defaultdict(list)  # rack key -> [(hostname, u, height, kw)] added by this file
        seen, seen_serials, seen_tags, seen_addresses = {}, {}, {}, {}
        for number, values, raw in self.parsed.get("nodes", []):
            hostname = values.get("hostname")
            if hostname is None:
                self.missing("nodes", number, values, key_only=True)
                continue
            if self._duplicate("nodes", seen, hostname.lower(), number, "hostname", raw.get("hostname")):
                continue
            if not self._asset_tag_free(number, hostname, values.get("asset_tag"), seen_tags, raw):
                continue
            if not self._addresses_free(number, hostname, values, seen_addresses, raw):
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
            bmc = {BMC_COLUMNS[k]: values[k] for k in BMC_COLUMNS if k in values}
            plain = {k: v for k, v in values.items() if k not in REFERENCE_COLUMNS and k not in BMC_COLUMNS}
            if not self._bmc_ok(number, bmc, raw):
                continue
            existing = self.db_nodes.get(hostname.lower())
            if existing is not None and existing.hostname != hostname:
                self.error(
                    "nodes",
                    number,
                    "hostname",
                    raw.get("hostname"),
                    f"node {existing.hostname} already has this name in other letter case; hostnames are not "
                    f"case-sensitive. Write it as {existing.hostname} to refer to that node, or choose another name.",
                )
                continue
            if existing is not None:
                if not any(v is None for v in refs.values()):
                    self._node_update(number, existing, plain, refs, raw, placed, bmc)
                continue
            if self.missing("nodes", number, values) or self.stale("nodes", number, hostname, None):
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
            self.file_nodes[hostname.lower()] = node
            if bmc:
                self.plan.bmcs.append((node, bmc))

    def _bmc_ok(self, number: int, bmc: dict, raw: dict) -> bool:
        """A BMC address must be an address or DNS name inside the BMC networks; a MAC a MAC."""
        ok = True
        for attr, validator, column in (
            ("address", validate_bmc_address, "bmc_address"),
            ("mac", validate_mac, "bmc_mac"),
        ):
            if attr not in bmc:
                continue
            try:
                validator(bmc[attr])
                if attr == "address":
                    check_bmc_address(bmc[attr])
                else:
                    bmc[attr] = normalise_mac(bmc[attr])
            except ValidationError as exc:
                self.error("nodes", number, column, raw.get(column), exc.messages[0])
                ok = False
            except AddressRefused as exc:
                self.error("nodes", number, column, raw.get(column), exc.detail)
                ok = False
        return ok

    def _addresses_free(self, number: int, hostname: str, values: dict, seen: dict, raw: dict) -> bool:
        """A node's management and data-plane addresses are its own: not two rows of this file,
        not the node's other address, not another node's (either column)."""
        ok = True
        for column in ("management_address", "data_address"):
            address = values.get(column)
            if address is None:
                continue
            other = seen.get(address)
            if other is not None:
                self.error(
                    "nodes",
                    number,
                    column,
                    raw.get(column),
                    f"address also given as {other[2]} of node {other[1]} on row {other[0]} of this file; "
                    "every address names one interface of one node.",
                )
                ok = False
                continue
            seen[address] = (number, hostname, column)
            owner = self.db_node_addresses.get(address)
            if owner is not None and owner != hostname:
                self.error(
                    "nodes",
                    number,
                    column,
                    raw.get(column),
                    f"address already belongs to node {owner}; correct it or change {owner}'s first.",
                )
                ok = False
        return ok

    def _asset_tag_free(self, number: int, hostname: str, tag, seen_tags: dict, raw: dict) -> bool:
        """An asset tag names one chassis: not two rows of this file, nor another node already."""
        if tag is None:
            return True
        other = seen_tags.get(tag)
        if other is not None:
            row, other_host = other
            self.error(
                "nodes",
                number,
                "asset_tag",
                raw.get("asset_tag"),
                f"asset tag also given to node {other_host} on row {row} of this file; each chassis has its own.",
            )
            return False
        seen_tags[tag] = (number, hostname)
        owner = self.db_node_asset_tags.get(tag)
        if owner is not None and owner != hostname:
            self.error(
                "nodes",
                number,
                "asset_tag",
                raw.get("asset_tag"),
                f"asset tag already belongs to node {owner}; correct the tag or change {owner}'s first.",
            )
            return False
        return True

    def _node_update(self, number, node: Node, plain: dict, refs: dict, raw: dict, placed, bmc: dict) -> None:
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

        errors = len(self.plan.errors)
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
        self.file_nodes[node.hostname.lower()] = node
        current = self.db_bmcs.get(node.pk, {"address": "", "mac": ""})
        changed = {f"bmc_{k}": (current[k], v) for k, v in bmc.items() if current[k] != v}
        planned = self.plan.rows[-1] if self.plan.rows else None
        if (
            changed
            and len(self.plan.errors) == errors
            and planned
            and (planned.sheet, planned.row) == ("nodes", number)
        ):
            self.plan.bmcs.append((node, bmc))
            planned.diff.update(changed)
            planned.action = "update"

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
        # feeds and the hall budget: checked when the row adds load (as Node.clean does)
        origin = self.origin.get(exclude_pk) if exclude_pk else None
        kw = node.node_type.node_kw
        more_kw = origin is None or origin[1] < kw
        to_rack = more_kw or origin[2] != rack.pk
        to_hall = more_kw or origin[0] != rack.hall_id
        hall_load = None
        if to_hall:
            hall_load = self.hall_load[rack.hall_id] + self.hall_added[rack.hall_id]
            if origin and origin[0] == rack.hall_id:
                hall_load -= origin[1]
        problems = placement_errors(
            rack=rack,
            node_type=node.node_type,
            u_position=node.u_position,
            fabric_domain=node.fabric_domain,
            others=others,
            feed_kw=self.feed_kw.get(rack.pk) if to_rack and not rack._state.adding else None,
            hall_load_kw=hall_load,
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
        if to_hall:
            self.hall_added[rack.hall_id] += kw
            if origin:
                self.hall_added[origin[0]] -= origin[1]
        placed[rack_key].append((node.hostname, node.u_position, node.node_type.u_height, node.node_type.node_kw))
        return True

    def _node_of(self, sheet: str, number: int, values: dict, raw: dict):
        hostname = values.get("node")
        if hostname is None:
            return None
        node = self.file_nodes.get(hostname.lower()) or self.db_nodes.get(hostname.lower())
        if node is None:
            rejected = any(e.sheet == "nodes" and e.value == echo_value(hostname) for e in self.plan.errors)
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
        refusal = self.hardware_refusals.get(node.pk)
        if refusal:
            self.error(sheet, number, "node", raw.get("node"), refusal)
            return None
        return node

    def gpus(self) -> None:
        seen, slots = {}, {}
        for number, values, raw in self.parsed.get("gpus", []):
            if self.missing("gpus", number, values):
                continue
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
            if self.missing("drives", number, values):
                continue
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

    def _load_bmcs(self) -> None:
        """The BMC address and MAC of each node the file names (its BMC record's), locked with the
        nodes at confirm: what the stale-preview check compares and the writer changes."""
        self.bmc_in_file = sets_bmc_columns(self.book)
        self.db_bmcs: dict = {}
        records = NodeBMC.objects.all()
        if self.lock:
            records = records.select_for_update()
        for chunk in in_chunks([n.pk for n in self.db_nodes.values()]):
            for node_id, address, mac in records.filter(node_id__in=chunk).values_list("node_id", "address", "mac"):
                self.db_bmcs[node_id] = {"address": address, "mac": mac}

    def stored_values(self, sheet: str, instance) -> dict:
        """A node row's stored values; its bmc_address and bmc_mac are its BMC record's, and are
        part of them only when the file writes BMC values (the importer then holds
        change_nodebmc): a file that does not touch them cannot overwrite them, and its preview
        and refusals say nothing of them to someone who may not see them."""
        if sheet != "nodes":
            return super().stored_values(sheet, instance)
        bmc = self.db_bmcs.get(instance.pk, {"address": "", "mac": ""})
        stored = {}
        for column in SPECS[sheet][1]:
            if column.name not in BMC_COLUMNS:
                stored[column.name] = plain_value(getattr(instance, column.attr))
            elif self.bmc_in_file:
                stored[column.name] = bmc[BMC_COLUMNS[column.name]]
        return stored

    def run(self) -> ImportPlan:
        self.parse()
        if not any(self.parsed.values()) and not self.plan.errors:
            self.error("", 0, "", None, "The file has no data rows.")
        if self.parsed:
            self.load()
            self._load_bmcs()
            self.racks()
            self.nodes()
            self.gpus()
            self.drives()
        self.plan.errors.sort(key=lambda e: (SHEETS.index(e.sheet) if e.sheet in SHEETS else -1, e.row))
        return self.plan
