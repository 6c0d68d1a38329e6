"""Evidence frozen while it matters (issue 42, docs/admin.md "Evidence is kept"): the GPUs and
drives of a node that is allocated, or has been in service since its last sanitisation, cannot
be added, changed, moved or removed from a form (the GPU and drive admins, the node's inlines,
the import); the node agent's inventory still writes them; a drive's self-encryption is never a
form field. The rule is checked against an oracle written from the docs over random histories."""

import itertools
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.models import AuditEvent
from fleet.models import GPU, Drive, Node, hardware_change_refusals
from fleet.services.drive_inventory import reconcile_drive_inventory

from .admin_helpers import change_form_data, client_for, sanitise, serve, staff_with

pytestmark = pytest.mark.django_db
NOW = timezone.now()


@pytest.fixture
def inventory_admin(django_user_model):
    perms = [f"fleet.{a}_{m}" for a in ("view", "add", "change", "delete") for m in ("node", "gpu", "drive")]
    return client_for(Client, staff_with(django_user_model, "inv", *perms))


@pytest.fixture
def nodes(small_fleet):
    return list(Node.objects.filter(lifecycle="available").order_by("hostname")[:3])


def _serve(node, *, started, ended=None, lifecycle=None):
    serve(node, started=started, ended=ended)
    if lifecycle:
        Node.objects.filter(pk=node.pk).update(lifecycle=lifecycle)
    node.refresh_from_db()


def _post_change(client, obj, **overrides):
    url = reverse(f"admin:fleet_{obj._meta.model_name}_change", args=[obj.pk])
    page = client.get(url)
    assert page.status_code == 200
    return page, client.post(url, change_form_data(page, **overrides))


def test_an_allocated_nodes_gpu_and_drive_forms_change_nothing(inventory_admin, nodes):
    node = nodes[0]
    _serve(node, started=NOW - timedelta(hours=1), lifecycle="provisioning")
    gpu, drive = node.gpus.first(), node.drives.first()
    _page, response = _post_change(inventory_admin, gpu, serial="SWAPPED")
    assert response.status_code == 403  # the page was view-only; the POST is refused (and audited)
    gpu.refresh_from_db()
    assert gpu.serial != "SWAPPED"
    _page, response = _post_change(inventory_admin, drive, model="Other", capacity_gb="1")
    assert response.status_code == 403
    drive.refresh_from_db()
    assert drive.model != "Other" and drive.capacity_gb != 1
    added = inventory_admin.post(
        reverse("admin:fleet_drive_add"),
        {"node": node.pk, "serial": "DSN-SNEAKED", "model": "m", "capacity_gb": 10, "interface": "nvme"},
    )
    assert added.status_code == 200 and "carries a tenant allocation" in added.content.decode()
    assert not Drive.objects.filter(serial="DSN-SNEAKED").exists()
    refused = AuditEvent.objects.filter(action__in=("gpu.admin_refused", "drive.admin_refused"))
    assert refused.count() == 2


def test_an_in_service_nodes_drive_is_neither_moved_nor_renamed(inventory_admin, nodes):
    served, other = nodes[0], nodes[1]
    _serve(served, started=NOW - timedelta(days=3), ended=NOW - timedelta(days=1))
    drive = served.drives.first()
    _page, response = _post_change(inventory_admin, drive, node=str(other.pk), serial="RENAMED")
    assert response.status_code == 403
    drive.refresh_from_db()
    assert drive.node_id == served.pk and drive.serial != "RENAMED"
    # nor can a drive of a node never in service be moved onto it
    spare = other.drives.first()
    _page, response = _post_change(inventory_admin, spare, node=str(served.pk))
    assert response.status_code == 200 and "has been in service" in response.content.decode()
    spare.refresh_from_db()
    assert spare.node_id == other.pk
    # the node's page offers no add, change or delete of its GPUs and drives
    page = inventory_admin.get(reverse("admin:fleet_node_change", args=[served.pk]))
    for inline in page.context["inline_admin_formsets"]:
        if inline.opts.model in (GPU, Drive):
            assert not (inline.has_add_permission or inline.has_change_permission or inline.has_delete_permission)


def test_once_every_drive_is_sanitised_after_the_last_service_the_parts_may_change(inventory_admin, nodes):
    node = nodes[0]
    _serve(node, started=NOW - timedelta(days=3), ended=NOW - timedelta(days=1))
    drives = list(node.drives.all())
    for drive in drives[:-1]:
        sanitise(drive, NOW - timedelta(hours=2))
    sanitise(drives[-1], NOW - timedelta(hours=2), verified=False)
    assert hardware_change_refusals([node])  # one drive's record is not verified
    sanitise(drives[-1], NOW - timedelta(hours=1))
    assert hardware_change_refusals([node]) == {}
    gpu = node.gpus.first()
    _page, response = _post_change(inventory_admin, gpu, serial="REPLACED-AFTER-SANITISE")
    assert response.status_code == 302
    gpu.refresh_from_db()
    assert gpu.serial == "REPLACED-AFTER-SANITISE"


def test_self_encryption_is_never_a_form_field(inventory_admin, nodes):
    drive = nodes[2].drives.first()  # a node never in service: its drives may be corrected
    page = inventory_admin.get(reverse("admin:fleet_drive_change", args=[drive.pk]))
    assert "self_encrypting" not in page.context["adminform"].form.fields
    before = drive.self_encrypting
    _page, response = _post_change(inventory_admin, drive, model="Corrected model", self_encrypting="on")
    assert response.status_code == 302
    drive.refresh_from_db()
    assert drive.model == "Corrected model" and drive.self_encrypting == before
    node_page = inventory_admin.get(reverse("admin:fleet_node_change", args=[nodes[2].pk]))
    drive_inline = next(i for i in node_page.context["inline_admin_formsets"] if i.opts.model is Drive)
    assert "self_encrypting" not in drive_inline.formset.forms[0].fields


def test_the_agents_inventory_still_writes_a_frozen_nodes_drives(nodes):
    node = nodes[0]
    _serve(node, started=NOW - timedelta(hours=1), lifecycle="active")
    reported = [
        {"serial": d.serial, "model": d.model, "capacity_gb": d.capacity_gb, "self_encrypting": True}
        for d in node.drives.all()
    ]
    reconcile_drive_inventory(node_id=node.pk, drives=reported, observed_at=NOW, now=NOW)
    assert set(node.drives.values_list("self_encrypting", flat=True)) == {True}


def test_the_import_adds_no_drive_to_a_node_in_service(nodes, django_user_model):
    from fleet.inventory_files import Sheet, Workbook
    from fleet.services.inventory_import import plan_import

    node = nodes[0]
    _serve(node, started=NOW - timedelta(days=3), ended=NOW - timedelta(days=1))
    header = ["node", "serial", "model", "capacity_gb", "interface"]
    plan = plan_import(
        Workbook({"drives": Sheet("drives", header, [(2, [node.hostname, "DSN-X", "m", 10, "nvme"])])}, [])
    )
    [error] = plan.errors
    assert error.column == "node" and "has been in service" in error.message


# ---- the rule against an oracle written from the docs -------------------------------------------

# a history: allocations as (start hours ago, end hours ago or None), then drive records as
# (drive index, hours ago, verified)
histories = st.tuples(
    st.lists(st.tuples(st.integers(2, 100), st.one_of(st.none(), st.integers(0, 1))), max_size=2),
    st.lists(st.tuples(st.integers(0, 1), st.integers(0, 120), st.booleans()), max_size=4),
    st.sampled_from([1, 2]),  # drives on the node: sizes 1 and 2
)


def _oracle(allocations, records, drives) -> bool:
    """docs/admin.md: frozen while allocated, or if it has served and not every drive has a
    verified sanitisation at or after the start of its last allocation."""
    if any(end is None for _start, end in allocations):
        return True
    if not allocations:
        return False
    last_start = min(start for start, _end in allocations)  # hours ago: the most recent start
    return not all(
        any(d == index and verified and ago <= last_start for d, ago, verified in records) for index in range(drives)
    )


_FRESH = itertools.count()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories)
def test_the_freeze_follows_the_documented_rule_over_random_histories(small_fleet, history):
    allocations, records, drive_count = history
    # one live allocation at most (tenancy's partial unique index): later ones have ended
    allocations = [(start, end if end is not None or i == 0 else 0) for i, (start, end) in enumerate(allocations)]
    template = Node.objects.filter(lifecycle="available").order_by("hostname").first()
    number = next(_FRESH)
    node = Node.objects.create(  # a fresh node per history: sanitisation records are never deleted
        hostname=f"oracle-{number}",
        serial=f"SN-ORACLE-{number}",
        rack=template.rack,
        u_position=100 + number,
        node_type=template.node_type,
        lifecycle="available",
    )
    drives = [
        Drive.objects.create(node=node, serial=f"ORACLE-{number}-{i}", model="m", capacity_gb=1)
        for i in range(drive_count)
    ]
    for start, end in allocations:
        _serve(node, started=NOW - timedelta(hours=start), ended=None if end is None else NOW - timedelta(hours=end))
    for index, ago, verified in records:
        if index < drive_count:
            sanitise(drives[index], NOW - timedelta(hours=ago), verified)
    frozen = node.pk in hardware_change_refusals([Node.objects.get(pk=node.pk)])
    kept = [r for r in records if r[0] < drive_count]
    assert frozen == _oracle(allocations, kept, drive_count), (allocations, kept, drive_count)
