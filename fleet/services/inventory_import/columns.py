"""The import's vocabulary: the plan and its row errors, and each sheet's columns with the
parser that turns a cell into a value (or a message saying what to write instead)."""

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from fleet.choices import Cooling, DriveInterface
from fleet.models import (
    GPU,
    Drive,
    Node,
    Rack,
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
    stored: dict | None = None  # an existing row's columns as stored when planned (None: a new row)


@dataclass
class ImportPlan:
    errors: list[RowError] = field(default_factory=list)
    rows: list[PlannedRow] = field(default_factory=list)
    new_racks: list[Rack] = field(default_factory=list)
    new_nodes: list[Node] = field(default_factory=list)
    new_gpus: list[GPU] = field(default_factory=list)
    new_drives: list[Drive] = field(default_factory=list)
    updates: list[tuple[object, list[str], dict]] = field(default_factory=list)  # (instance, fields, diff)
    bmcs: list[tuple[object, dict]] = field(default_factory=list)  # (node, {"address", "mac"} given) to write

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

    def snapshot(self) -> dict[str, dict[str, dict | None]]:
        """What each updatable row found in the database ({sheet: {key: columns or None}}): kept
        with the preview, so that the confirm applies exactly what the preview showed."""
        out: dict[str, dict] = {}
        for row in self.rows:
            if row.sheet in UPDATABLE:
                out.setdefault(row.sheet, {})[row.key] = row.stored
        return out


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


def _agent_reported(value):
    """A drive's self-encryption decides how it is sanitised (a cryptographic erase needs it), so
    it is what the node agent reads from the drive, never what a file says. The column stays in the
    sheet (exports carry it) but takes no value."""
    raise ValueError(
        "is reported by the node agent from the drive itself (it decides how the drive is sanitised), "
        "not imported; leave the cell empty or remove the column"
    )


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
            Column("asset_tag", _text),  # optional; unique when set (fleet_node_asset_tag_unique)
            Column("management_address", _text),  # optional; unique across both address columns
            Column("data_address", _text),  # the address tenants ssh to
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
            Column("self_encrypting", _agent_reported),
        ],
    ),
}
SHEET_NOUNS = {"racks": "rack", "nodes": "node", "gpus": "GPU", "drives": "drive"}
REFERENCE_COLUMNS = {"hall", "rack", "node_type", "fabric_domain", "node"}
# Columns of the nodes sheet that are the node's BMC record (fleet.NodeBMC), not the node: writing
# them needs the BMC record's permission, and the addresses are held to the BMC network policy.
BMC_COLUMNS = {"bmc_address": "address", "bmc_mac": "mac"}
BMC_PERMISSION = "fleet.change_nodebmc"


def sets_bmc_columns(workbook) -> bool:
    """Whether any row of the file's nodes sheet gives a BMC address or MAC."""
    sheet = workbook.sheets.get("nodes")
    if sheet is None:
        return False
    positions = [i for i, header in enumerate(sheet.headers) if header in BMC_COLUMNS]
    return any(i < len(cells) and not is_blank(cells[i]) for _, cells in sheet.rows for i in positions)


UPDATABLE = {"racks", "nodes"}
MODEL_OF_SHEET = {"racks": Rack, "nodes": Node, "gpus": GPU, "drives": Drive}


def columns_of(sheet: str) -> list[str]:
    return [c.name for c in SPECS[sheet][1]]


def echo_value(value) -> str:
    text = "" if value is None else str(value)
    return repr(text if len(text) <= MAX_VALUE_ECHO else text[:MAX_VALUE_ECHO] + "…")


def is_blank(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def in_chunks(values: list, size: int = CHUNK):
    for start in range(0, len(values), size):
        yield values[start : start + size]


# ---- planning --------------------------------------------------------------------------------


def plain_value(value):
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, (Decimal, datetime.date)):
        return str(value)
    return str(value)
