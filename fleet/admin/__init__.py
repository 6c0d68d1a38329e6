"""Inventory admin: the system of record for sites, halls, racks, node types, nodes, GPUs and
drives. NetBox-style lists (filters, search, links), every write audited, and nothing the state
machine or a tenant allocation depends on editable from a form.

Bulk import/export (CSV or XLSX) goes through fleet.services.inventory_import: preview with
every problem and every update's diff, then confirm, all or nothing. Import needs the add
permission of each sheet's model (and change for updates); export needs view."""

# Importing the modules registers their ModelAdmins.
from . import bmc, events, facility, inventory_files, nodes, parts, software  # noqa: F401
