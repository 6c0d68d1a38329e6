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
- a node's BMC address and MAC go to its BMC record: they need `fleet.change_nodebmc`, the
  address must lie in the BMC networks, and a changed address clears the record's credentials;
- every new node gets its `enrol` event, and every write its audit row.
"""

from .columns import (
    BMC_COLUMNS,
    BMC_PERMISSION,
    MODEL_OF_SHEET,
    UPDATABLE,
    ImportPlan,
    ImportRejected,
    RowError,
    columns_of,
    sets_bmc_columns,
)
from .events import record_enrolment, record_inventory_update
from .staging import claim_staged, stage_workbook
from .writer import apply_import, plan_import

__all__ = [
    "BMC_COLUMNS",
    "BMC_PERMISSION",
    "MODEL_OF_SHEET",
    "UPDATABLE",
    "ImportPlan",
    "ImportRejected",
    "RowError",
    "apply_import",
    "claim_staged",
    "columns_of",
    "plan_import",
    "record_enrolment",
    "record_inventory_update",
    "sets_bmc_columns",
    "stage_workbook",
]
