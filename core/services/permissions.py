"""The one permission model: which Django permission each privileged action needs.

The console, the admin and the operator API all ask `require_permission(user, action)` (API
callers through `core.api.permissions.IsOperator`, with the user behind the operator token),
so a staff account without the permission is refused everywhere, not only where a button is
hidden. Permissions are Django model permissions; the named groups below bundle them and are
created by a data migration (core 0003_role_groups) and topped up after every `migrate`.

docs/permissions.md shows this table; a test keeps the two in step.
"""

from dataclasses import dataclass

from django.apps import apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission
from django.db import router

from core.errors import Refused

# Reads of the operator API and console need a staff account; the groups below also carry
# the `view_*` permissions the admin needs for the same data.
STAFF_READ = "is_staff"


@dataclass(frozen=True)
class OpsAction:
    name: str
    permission: str
    what: str


def _actions(*rows: tuple[str, str, str]) -> dict[str, OpsAction]:
    return {name: OpsAction(name, permission, what) for name, permission, what in rows}


_OPERATE = "fleet.change_node"
# Leaving the fleet cannot be undone (drives wiped, node sold), so it is a permission of its own.
_REMOVE = "fleet.delete_node"

OPS_ACTIONS: dict[str, OpsAction] = _actions(
    ("node.cordon", _OPERATE, "cordon a node"),
    ("node.uncordon", _OPERATE, "uncordon a node"),
    ("node.drain", _OPERATE, "drain a node"),
    ("node.start_bring_up", _OPERATE, "start (or retry) the bring-up ladder"),
    ("node.start_burn_in", _OPERATE, "start burn-in"),
    ("node.validate", _OPERATE, "run validation (DCGM level 3)"),
    ("node.remediate", _OPERATE, "remediate (GPU reset)"),
    ("node.triage", _OPERATE, "send a node to triage"),
    ("node.repair", _OPERATE, "send a node to repair"),
    ("node.rma", _OPERATE, "send a node to RMA"),
    ("node.power", _OPERATE, "power a node on, off or cycle it through its BMC"),
    ("node.bmc_edit", "fleet.change_nodebmc", "set a node's BMC address and credentials"),
    ("fleet.enrol_from_bmcs", "fleet.add_node", "enrol nodes discovered from a range of BMC addresses"),
    ("node.decommission", _REMOVE, "decommission a node"),
    ("node.sanitize", _REMOVE, "sanitise a node's drives"),
    ("node.retire", _REMOVE, "retire a node"),
    ("node.dispose", _REMOVE, "dispose of a node"),
    ("drive.record_sanitization", "fleet.add_sanitizationrecord", "record a drive's sanitisation with evidence"),
    ("node.record_bmc_reset", "fleet.change_nodedisposal", "record the BMC reset"),
    ("node.record_asset_tags_removed", "fleet.change_nodedisposal", "record the asset tags removed"),
    ("node.record_custody_transfer", "fleet.add_custodytransfer", "record a chain-of-custody transfer"),
    ("baseline.create", "fleet.add_softwarebaseline", "create a software baseline for a node type"),
    ("baseline.set_golden", "fleet.change_softwarebaseline", "make a baseline its node type's golden one"),
    ("rollout.create", "fleet.add_rollout", "start a rolling upgrade of nodes to a baseline"),
    ("rollout.control", "fleet.change_rollout", "pause, resume or cancel a rolling upgrade"),
    ("site.upload_grid_profile", "fleet.add_gridintensityhour", "upload a site's hourly grid carbon intensity"),
    ("disposition_plan.create", "planning.add_dispositionplan", "create a disposition plan"),
    ("migration_plan.create", "planning.add_migrationplan", "create a migration plan"),
    ("migration_plan.apply", "planning.change_migrationplan", "apply a migration plan (schedules node actions)"),
    ("capacity_plan.create", "planning.add_capacityplan", "create a capacity plan from a demand forecast"),
    ("capacity_plan.to_migration", "planning.add_migrationplan", "turn a capacity plan's gap into a migration plan"),
    ("incident.open", "health.add_incident", "open an incident"),
    ("incident.acknowledge", "health.change_incident", "acknowledge or resolve an incident's page"),
    ("paging_channel.manage", "health.change_pagingchannel", "configure paging channels and send a test page"),
    ("delivery.retry", "core.change_outboxdelivery", "retry a dead-lettered notification, replay a delivery"),
    ("incident.postmortem", "health.change_incident", "write an incident's post-mortem, close it"),
    ("billing_run.create", "billing.add_billingrun", "run billing for a period (drafts, finalizes invoices)"),
    ("invoice.reissue", "billing.change_invoice", "void a finalized invoice and issue its replacement"),
    ("credit_note.create", "billing.add_creditnote", "issue a credit note against an invoice"),
    ("adjustment.create", "billing.add_adjustment", "record a manual credit or charge"),
    ("dispute.resolve", "billing.resolve_usagedispute", "accept or reject disputed usage"),
    ("price_book.add", "billing.add_pricebookentry", "add a price-book version effective in the future"),
    ("sla_policy.add", "billing.add_slapolicy", "add an SLA policy version effective in the future"),
)

# The named groups. Each gets the permissions of its actions plus every `view_*` permission
# of the apps it reads.
PROJECT_APPS = ("core", "fleet", "health", "tenants", "billing", "planning")
ROLE_GROUPS: dict[str, dict] = {
    "operators": {
        "actions": [name for name, a in OPS_ACTIONS.items() if not a.permission.startswith("billing.")],
        "view_apps": PROJECT_APPS,
    },
    "billing-admins": {
        "actions": [name for name, a in OPS_ACTIONS.items() if a.permission.startswith("billing.")],
        "view_apps": ("billing", "tenants"),
    },
    "read-only": {"actions": [], "view_apps": PROJECT_APPS},
}


class PermissionMissing(Refused):
    """The caller lacks the permission an action needs (→ 403 `permission_denied`, naming it)."""

    code = "permission_denied"

    def __init__(self, action: str, permission: str, detail: str = ""):
        self.action = action
        self.permission = permission
        groups = [g for g, role in ROLE_GROUPS.items() if action in role["actions"]]
        where = f" (the {' or '.join(groups)} group has it)" if groups else ""
        super().__init__(
            detail or f"{action} needs the {permission} permission; ask an administrator to grant it{where}.",
            extra={"permission": permission, "action": action},
        )


def permission_for(action: str) -> str:
    """The permission `action` needs. An action missing from the table is a KeyError at import
    or in tests, never a silently unchecked write."""
    return OPS_ACTIONS[action].permission


def has_permission(user, action: str) -> bool:
    return bool(
        user is not None
        and getattr(user, "is_active", False)
        and getattr(user, "is_staff", False)
        and user.has_perm(permission_for(action))
    )


def require_permission(user, action: str) -> None:
    if not has_permission(user, action):
        raise PermissionMissing(action, permission_for(action))


def sync_role_groups(group_model, permission_model) -> dict[str, int]:
    """Create the named groups and add their permissions (never removes one an administrator
    added). Takes the models so the data migration can pass its historical ones."""
    counts = {}
    for name, role in ROLE_GROUPS.items():
        group, _ = group_model.objects.get_or_create(name=name)
        wanted = {permission_for(a) for a in role["actions"]}
        perms = list(
            permission_model.objects.filter(content_type__app_label__in=role["view_apps"], codename__startswith="view_")
        )
        for dotted in sorted(wanted):
            app_label, codename = dotted.split(".", 1)
            perms.extend(permission_model.objects.filter(content_type__app_label=app_label, codename=codename))
        group.permissions.add(*perms)
        counts[name] = group.permissions.count()
    return counts


def top_up_role_groups_after_migrate(sender, using="default", **kwargs):
    """post_migrate: after every migrate the named groups exist and hold the permissions of the
    table, including those of models added since the data migration.

    Not after a flush (post_migrate without a plan): a test database restored from its
    serialized contents brings its own group rows, and re-creating them first would collide.
    The test suite tops the groups up itself after a flush (tests/conftest.py)."""
    if kwargs.get("plan") is None:
        return
    top_up_role_groups(using)


def top_up_role_groups(using: str = "default") -> None:
    if not router.allow_migrate_model(using, Permission):
        return
    for label in PROJECT_APPS:
        create_permissions(apps.get_app_config(label), verbosity=0, using=using)
    sync_role_groups(Group, Permission)
