"""Inventory admin and the Fleet page: they render, validate, import/export, and their query
counts do not grow with the fleet."""

import pytest
from django.urls import reverse

from devtools.services.fleet_seed import seed_fleet
from fleet.models import Node, Rack

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("gpus", [64, 1024])
def test_node_changelist_query_count_is_fixed(operator_client, django_assert_max_num_queries, gpus):
    seed_fleet(gpus=gpus)
    with django_assert_max_num_queries(12):
        response = operator_client.get(reverse("admin:fleet_node_changelist"))
    assert response.status_code == 200
    assert b"dc1-gpu00001" in response.content


def test_node_change_page_shows_inline_gpus_and_drives(operator_client, small_fleet):
    node = Node.objects.first()
    response = operator_client.get(reverse("admin:fleet_node_change", args=[node.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('name="gpus-') > 8 and html.count('name="drives-') > 10


def test_admin_refuses_nvl72_in_an_air_rack_with_a_clear_message(operator_client, small_fleet):
    rack = Rack.objects.filter(cooling="air", nodes__isnull=False).first()
    from fleet.models import NodeType

    response = operator_client.post(
        reverse("admin:fleet_node_add"),
        {
            "hostname": "nvl-x",
            "serial": "NVLX",
            "node_type": NodeType.objects.get(slug="gb200-nvl72").pk,
            "rack": rack.pk,
            "u_position": 30,
            "leaf_switch": "",
            "gpus-TOTAL_FORMS": 0,
            "gpus-INITIAL_FORMS": 0,
            "drives-TOTAL_FORMS": 0,
            "drives-INITIAL_FORMS": 0,
            "events-TOTAL_FORMS": 0,
            "events-INITIAL_FORMS": 0,
        },
    )
    assert response.status_code == 200
    assert "needs liquid cooling" in response.content.decode()
    assert not Node.objects.filter(hostname="nvl-x").exists()


def test_rack_csv_export_from_the_admin(operator_client, small_fleet):
    export = operator_client.get(reverse("admin:fleet_rack_export"), {"format": "csv"})
    assert export.status_code == 200
    body = b"".join(export.streaming_content)
    assert b"rated_power_kw" in body and b"hall-1-r0001" in body


def test_node_csv_import_creates_valid_rows_and_reports_impossible_placements(small_fleet):
    """The admin's import runs this service: each row is checked by the same placement rules as Node.clean()."""
    from fleet.inventory_files import read_workbook
    from fleet.services.inventory_import import apply_import, plan_import

    liquid = Rack.objects.filter(cooling="liquid").order_by("name")
    air = Rack.objects.filter(cooling="air", nodes__isnull=False).first()
    header = "hostname,serial,rack,u_position,node_type,fabric_domain,leaf_switch,bmc_address,commissioned_on\n"
    bad = read_workbook(
        "n.csv",
        (
            header + f"nvl-ok,SN-OK,{liquid[0].name},1,gb200-nvl72,,,,\nnvl-bad,SN-BAD,{air.name},30,gb200-nvl72,,,,\n"
        ).encode(),
        csv_sheet="nodes",
        max_rows=100,
    )
    plan = plan_import(bad)
    assert "needs liquid cooling" in " ".join(str(e) for e in plan.errors)
    assert {e.row for e in plan.errors} == {3}  # cooling, power and U height: all of them at once
    good = read_workbook(
        "n.csv",
        (header + f"nvl-ok,SN-OK,{liquid[0].name},1,gb200-nvl72,,,,\n").encode(),
        csv_sheet="nodes",
        max_rows=100,
    )
    apply_import(good, actor="test")
    assert Node.objects.filter(hostname="nvl-ok", lifecycle="enrolled").exists()
    assert not Node.objects.filter(hostname="nvl-bad").exists()


def test_fleet_page_lists_racks_with_power_and_states(operator_client, django_assert_max_num_queries):
    seed_fleet(gpus=512)
    with django_assert_max_num_queries(8):
        response = operator_client.get("/fleet/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "20.4 kW / 23.0 kW" in html
    assert html.count("Available · 2") == 32
    assert "empty position" in html


def test_console_pages_need_an_operator_login(client, small_fleet, django_user_model):
    assert client.get("/fleet/").url.startswith("/accounts/login/")
    user = django_user_model.objects.create_user("tenant-user", password="x" * 12)
    client.force_login(user)
    assert client.get("/").status_code == 403  # signed in but no operator: the 403 page says where to go


def test_overview_counts_gpus_by_state(operator_client, small_fleet):
    response = operator_client.get("/")
    assert response.status_code == 200
    assert response.context["summary"].totals.total == Node.objects.count() * 8 == 64
