"""One audit trail for every admin write (issue 42, docs/admin.md "One audit trail"): users,
groups and permissions, celery-beat's periodic tasks, BMC records (credentials only as
`credentials_set`), exports (who, what, how many rows) and refused attempts all land in
core.AuditEvent through one audited admin base; secrets never do."""

import json

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from core.admin import AuditedModelAdmin
from core.models import AuditEvent
from fleet.models import Node, NodeBMC
from fleet.services.bmc_credentials import set_bmc
from tests.fleet.admin_helpers import change_form_data, client_for, staff_with

pytestmark = pytest.mark.django_db


def _user_change_data(user, **overrides) -> dict:
    """The POST of Django's user change form (its dates are split widgets)."""
    data = {
        "username": user.username,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "email": user.email,
        "is_active": "on",
        "is_staff": "on" if user.is_staff else "",
        "groups": [str(g.pk) for g in user.groups.all()],
        "user_permissions": [str(p.pk) for p in user.user_permissions.all()],
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "initial-date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "initial-date_joined_1": user.date_joined.strftime("%H:%M:%S"),
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v != ""}


@pytest.fixture
def periodic_task():
    every = IntervalSchedule.objects.create(every=60, period=IntervalSchedule.SECONDS)
    return PeriodicTask.objects.create(name="health sweep", task="health.tasks.sweep", interval=every)


@pytest.fixture
def bmc(small_fleet):
    node = Node.objects.order_by("hostname").first()
    return set_bmc(
        node=node, redfish_url="https://10.9.0.1", username="root", password="S3cr3t-BMC-Pass!", actor="test"
    )


def test_a_groups_change_a_periodic_task_a_bmc_record_and_an_export_are_four_audit_events(
    admin_client, django_user_model, periodic_task, bmc
):
    operators, _ = Group.objects.get_or_create(name="operators")
    alice = django_user_model.objects.create_user("alice", password="pw-alice-123", is_staff=True)
    start = set(AuditEvent.objects.values_list("pk", flat=True))

    # 1. add alice to operators
    response = admin_client.post(
        reverse("admin:auth_user_change", args=[alice.pk]), _user_change_data(alice, groups=[str(operators.pk)])
    )
    assert response.status_code == 302, response.context and response.context["adminform"].form.errors
    # 2. change the periodic task's schedule
    page = admin_client.get(reverse("admin:django_celery_beat_periodictask_change", args=[periodic_task.pk]))
    data = change_form_data(page, description="every minute, checked by the lead")
    assert admin_client.post(page.request["PATH_INFO"], data).status_code == 302
    # 3. change the BMC record's address without new credentials: the stored ones were entered
    # for the old address, so they are cleared (docs/bmc.md, "bound to the address"), on the trail
    page = admin_client.get(reverse("admin:fleet_nodebmc_change", args=[bmc.pk]))
    data = change_form_data(page, redfish_url="https://10.9.0.2", username="", password="")
    assert admin_client.post(page.request["PATH_INFO"], data).status_code == 302
    # 4. export the node list
    export = admin_client.get(reverse("admin:fleet_node_export"), {"format": "csv"})
    body = b"".join(export.streaming_content)

    new = AuditEvent.objects.exclude(pk__in=start).order_by("at", "id")
    assert [e.action for e in new] == [
        "user.admin_update",
        "periodictask.admin_update",
        "node.bmc_set",
        "node.admin_export",
    ]
    groups, task, bmc_row, exported = new
    assert groups.actor == "user:admin" and groups.object_id == str(alice.pk)
    assert groups.before == {"groups": []} and groups.after == {"groups": ["operators"]}
    assert task.after == {"description": "every minute, checked by the lead"}
    assert bmc_row.before["redfish_url"] == "https://10.9.0.1" and bmc_row.after["redfish_url"] == "https://10.9.0.2"
    assert bmc_row.before["credentials_set"] is True
    assert bmc_row.after["credentials_set"] is False and bmc_row.after["credentials_cleared"] is True
    rows = body.decode().count("\n") - 1
    assert exported.after["rows"] == {"nodes": rows} and rows == Node.objects.count()
    assert exported.after["format"] == "csv" and exported.object_type == "fleet.node"
    assert "S3cr3t" not in json.dumps([e.before for e in new] + [e.after for e in new])


def test_group_permissions_are_on_the_trail(admin_client):
    group = Group.objects.create(name="inventory")
    perm = Permission.objects.get(codename="change_node")
    response = admin_client.post(
        reverse("admin:auth_group_change", args=[group.pk]), {"name": "inventory", "permissions": [perm.pk]}
    )
    assert response.status_code == 302
    row = AuditEvent.objects.get(action="group.admin_update")
    assert row.before == {"permissions": []} and row.after == {"permissions": [str(perm)]}


def test_passwords_are_never_written_down(admin_client):
    secret = "correct-horse-battery-staple-42"
    added = admin_client.post(
        reverse("admin:auth_user_add"),
        {"username": "bob", "password1": secret, "password2": secret, "usable_password": "true"},
    )
    assert added.status_code == 302
    bob = Node._meta.apps.get_model("auth", "User").objects.get(username="bob")
    created = AuditEvent.objects.get(action="user.admin_create")
    assert created.after["password1"] == "(set)" and created.after["username"] == "bob"
    changed = admin_client.post(
        reverse("admin:auth_user_password_change", args=[bob.pk]),
        {"password1": secret + "x", "password2": secret + "x", "usable_password": "true"},
    )
    assert changed.status_code == 302
    row = AuditEvent.objects.get(action="user.admin_password_set")
    assert row.after == {"password": "(set)"} and row.object_id == str(bob.pk)
    assert secret not in json.dumps(list(AuditEvent.objects.values("before", "after", "reason")), default=str)


def test_periodic_task_actions_leave_one_row_per_task(admin_client, periodic_task):
    response = admin_client.post(
        reverse("admin:django_celery_beat_periodictask_changelist"),
        {"action": "disable_tasks", "_selected_action": [periodic_task.pk]},
    )
    assert response.status_code == 302
    periodic_task.refresh_from_db()
    assert not periodic_task.enabled
    row = AuditEvent.objects.get(action="periodictask.admin_disable_tasks")
    assert row.object_id == str(periodic_task.pk) and row.actor == "user:admin"


def test_a_bmc_record_deleted_keeps_credentials_set_but_never_the_credentials(admin_client, bmc):
    address, mac = bmc.address, bmc.mac  # where the BMC was: the record's since #41
    assert address and mac
    response = admin_client.post(reverse("admin:fleet_nodebmc_delete", args=[bmc.pk]), {"post": "yes"})
    assert response.status_code == 302 and not NodeBMC.objects.filter(pk=bmc.pk).exists()
    row = AuditEvent.objects.get(action="nodebmc.admin_delete")
    assert row.before == {
        "node": bmc.node.hostname,
        "redfish_url": "https://10.9.0.1",
        "system_path": "",
        "address": address,
        "mac": mac,
        "credentials_set": True,
    }


def test_a_bmc_record_with_credentials_in_the_url_is_a_form_error_not_a_false_success(admin_client, small_fleet):
    node = Node.objects.order_by("hostname").first()
    NodeBMC.objects.filter(node=node).delete()  # the seed's record (its address and MAC): this is an add
    response = admin_client.post(
        reverse("admin:fleet_nodebmc_add"),
        {"node": node.pk, "redfish_url": "https://root:pw@10.9.0.3", "username": "root", "password": "pw"},
        follow=True,
    )
    html = response.content.decode()
    assert response.status_code == 200 and "never in the address" in html
    assert "was added successfully" not in html
    assert not NodeBMC.objects.filter(node=node).exists()


def test_refused_attempts_are_on_the_trail(small_fleet, django_user_model, periodic_task):
    viewer = client_for(Client, staff_with(django_user_model, "viewer", "view:*"))
    node = Node.objects.order_by("hostname").first()
    attempts = [
        viewer.post(reverse("admin:fleet_node_change", args=[node.pk]), {"hostname": "stolen"}),
        viewer.post(reverse("admin:fleet_node_import"), {}),
        viewer.post(
            reverse("admin:django_celery_beat_periodictask_changelist"),
            {"action": "run_tasks", "_selected_action": [periodic_task.pk]},
        ),
        viewer.post(reverse("admin:auth_group_add"), {"name": "admins"}),
    ]
    assert [r.status_code for r in attempts] == [403, 403, 403, 403]
    refused = list(AuditEvent.objects.filter(action__endswith=".admin_refused").order_by("at", "id"))
    assert [(r.action, r.object_id) for r in refused] == [
        ("node.admin_refused", str(node.pk)),
        ("node.admin_refused", ""),
        ("periodictask.admin_refused", ""),
        ("group.admin_refused", ""),
    ]
    assert all(r.actor == "user:viewer" and r.after["method"] == "POST" for r in refused)
    assert "run_tasks" in refused[2].reason and "fleet.add_node" in refused[1].reason
    assert not Group.objects.filter(name="admins").exists()


def test_every_registered_admin_is_on_the_audited_base():
    plain = [
        f"{model._meta.label}: {type(model_admin).__name__}"
        for model, model_admin in admin.site._registry.items()
        if not isinstance(model_admin, AuditedModelAdmin)
    ]
    assert plain == []


def test_an_xlsx_export_counts_each_sheet(admin_client, small_fleet):
    response = admin_client.get(reverse("admin:fleet_node_export"), {"format": "xlsx", "lifecycle": "available"})
    assert response.status_code == 200
    row = AuditEvent.objects.get(action="node.admin_export")
    nodes = Node.objects.filter(lifecycle="available")
    assert row.after["rows"] == {
        "nodes": nodes.count(),
        "gpus": 8 * nodes.count(),
        "drives": sum(n.drives.count() for n in nodes),
    }
    assert row.after["filters"] == "lifecycle=available"
