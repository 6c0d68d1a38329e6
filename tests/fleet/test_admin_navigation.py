"""The admin as a system of record people can move around in and that stays fast (issue 42,
docs/admin.md "Navigation" and "At scale"): the node page in a fixed, small number of queries;
links node ↔ BMC record ↔ console page ↔ audit rows; the node list's tenant, asset tag and hall
columns and drain-pending filter; the audit trail searched and filtered on its indexes; sorting
only where an index sorts; and no form answering 500 to a value that is not even an id."""

from datetime import timedelta

import pytest
from django.contrib import admin
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from core.admin import AtScaleAdmin
from core.services.audit import record_audit
from fleet.models import Node, NodeBMC, Rack
from fleet.services.bmc_credentials import set_bmc

from .admin_helpers import client_for, node_add_data, sanitise, serve, staff_with

pytestmark = pytest.mark.django_db
NODE_PAGE_MAX_QUERIES = 12


@pytest.fixture
def inventory_admin(django_user_model):
    """A staff user with model permissions (not a superuser): their permission checks cost queries too."""
    perms = [
        f"{app}.{a}_{m}"
        for app, m in (("fleet", "node"), ("fleet", "gpu"), ("fleet", "drive"), ("fleet", "nodebmc"))
        for a in ("view", "add", "change")
    ]
    return client_for(
        Client, staff_with(django_user_model, "inv", *perms, "core.view_auditevent", "fleet.view_nodeevent")
    )


def _allocate(node, *, ended=False, slug="acme"):
    now = timezone.now()
    return serve(node, started=now - timedelta(days=2), ended=now - timedelta(days=1) if ended else None, slug=slug)


@pytest.mark.parametrize("history", ["never served", "allocated", "served, not sanitised", "served and sanitised"])
def test_the_node_page_takes_a_fixed_small_number_of_queries(small_fleet, inventory_admin, history):
    node = Node.objects.filter(lifecycle="available").order_by("hostname").first()
    set_bmc(node=node, redfish_url="https://10.9.0.1", username="root", password="pw", actor="test")
    if history != "never served":
        _allocate(node, ended=history != "allocated")
    if history == "served and sanitised":
        for drive in node.drives.all():
            sanitise(drive, timezone.now())
    url = reverse("admin:fleet_node_change", args=[node.pk])
    inventory_admin.get(url)  # session and content types warm
    with CaptureQueriesContext(connection) as queries:
        response = inventory_admin.get(url)
    assert response.status_code == 200
    assert len(queries) <= NODE_PAGE_MAX_QUERIES, [q["sql"][:120] for q in queries.captured_queries]


def test_node_bmc_console_and_audit_rows_link_to_each_other(small_fleet, admin_client):
    node = Node.objects.order_by("hostname").first()
    bmc = set_bmc(node=node, redfish_url="https://10.9.0.1", username="root", password="pw", actor="test")
    node_page = admin_client.get(reverse("admin:fleet_node_change", args=[node.pk])).content.decode()
    bmc_url = reverse("admin:fleet_nodebmc_change", args=[bmc.pk])
    console = reverse("fleet:node-detail", args=[node.pk])
    audit = reverse("admin:core_auditevent_changelist") + f"?object_type=fleet.node&amp;object_id={node.pk}"
    assert bmc_url in node_page and console in node_page and audit in node_page
    bmc_page = admin_client.get(bmc_url).content.decode()
    assert reverse("admin:fleet_node_change", args=[node.pk]) in bmc_page and console in bmc_page
    assert audit in bmc_page
    rows = admin_client.get(audit.replace("&amp;", "&"))
    assert [e.action for e in rows.context["cl"].result_list] == ["node.bmc_set"]
    assert reverse("admin:fleet_node_change", args=[node.pk]) in rows.content.decode()  # the row links back
    # a node without a BMC record offers to add one, for itself (the seed gives every node a
    # record holding its BMC address, so this node's is removed first)
    other = Node.objects.order_by("hostname")[1]
    NodeBMC.objects.filter(node=other).delete()
    page = admin_client.get(reverse("admin:fleet_node_change", args=[other.pk])).content.decode()
    assert f"{reverse('admin:fleet_nodebmc_add')}?node={other.pk}" in page


def test_the_node_list_shows_tenant_asset_tag_and_hall_and_filters_drain_pending(small_fleet, admin_client):
    nodes = list(Node.objects.order_by("hostname")[:3])
    _allocate(nodes[0], slug="acme")
    Node.objects.filter(pk=nodes[1].pk).update(asset_tag="AT-000042", drain_requested_at=timezone.now())
    url = reverse("admin:fleet_node_changelist")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(url)
    html = response.content.decode()
    headers = [h["text"] for h in response.context["result_headers"]]
    assert {"asset tag", "hall", "tenant"} <= {str(h).lower() for h in headers}
    assert "acme" in html and "AT-000042" in html and str(nodes[0].rack.hall) in html
    assert not any('"fleet_node"' in q["sql"] and "DISTINCT" in q["sql"].upper() for q in queries.captured_queries)
    pending = admin_client.get(url, {"drain_pending": "yes"}).context["cl"].result_list
    assert [n.pk for n in pending] == [nodes[1].pk]
    assert nodes[1].pk not in [n.pk for n in admin_client.get(url, {"drain_pending": "no"}).context["cl"].result_list]


def test_the_node_list_shows_the_bmc_address_only_to_who_may_view_bmc_records(small_fleet, django_user_model):
    """The BMC address is the BMC record's (docs/bmc.md): the node list shows it, joined in its
    one query, to holders of view_nodebmc, and to nobody else."""
    node = Node.objects.order_by("hostname").first()
    url = reverse("admin:fleet_node_changelist")
    address = NodeBMC.objects.get(node=node).address
    assert address
    nodes_only = client_for(Client, staff_with(django_user_model, "viewer", "fleet.view_node"))
    response = nodes_only.get(url)
    headers = {str(h["text"]).lower() for h in response.context["result_headers"]}
    assert "bmc address" not in headers and address not in response.content.decode()

    with_bmcs = client_for(Client, staff_with(django_user_model, "bmc-viewer", "fleet.view_node", "fleet.view_nodebmc"))
    with_bmcs.get(url)  # session and content types warm
    with CaptureQueriesContext(connection) as queries:
        response = with_bmcs.get(url)
    headers = {str(h["text"]).lower() for h in response.context["result_headers"]}
    assert "bmc address" in headers and address in response.content.decode()
    assert not any('"fleet_nodebmc"' in q["sql"] and '"fleet_node"' not in q["sql"] for q in queries.captured_queries)
    # the search box finds a node by its BMC address for the same users only
    assert node.pk in [n.pk for n in with_bmcs.get(url, {"q": address}).context["cl"].result_list]
    assert list(nodes_only.get(url, {"q": address}).context["cl"].result_list) == []


@pytest.mark.parametrize(
    "url, data",
    [
        ("admin:fleet_node_add", {"rack": "not-a-uuid"}),
        ("admin:fleet_node_add", {"fabric_domain": "zzz"}),
        ("admin:fleet_node_add", {"node_type": "abc"}),
        ("admin:fleet_gpu_add", {"node": "nope", "index": 0, "uuid": "GPU-2f9d3b1e-7c4a-4e0b-9a51-0c7e4d2b8f11"}),
        ("admin:fleet_drive_add", {"node": "nope", "serial": "x", "model": "m", "capacity_gb": 1, "interface": "nvme"}),
        (
            "admin:fleet_nodebmc_add",
            {"node": "nope", "redfish_url": "https://10.1.1.1", "username": "a", "password": "b"},
        ),
        ("admin:tenants_allocation_changelist", {}),
    ],
)
def test_a_value_that_is_not_an_id_is_a_form_error_not_a_500(small_fleet, admin_client, url, data):
    rack = Rack.objects.filter(cooling="liquid").first()
    node_type = Node.objects.first().node_type
    base = node_add_data(hostname="form-x", rack=rack, node_type=node_type) if url == "admin:fleet_node_add" else {}
    bmcs = NodeBMC.objects.count()  # the seed's nodes have their BMC records (address and MAC)
    response = admin_client.post(reverse(url), {**base, **data})
    assert response.status_code in (200, 302, 403), response.status_code
    if url.endswith("_add"):
        assert response.status_code == 200 and response.context["adminform"].form.errors
    assert not Node.objects.filter(hostname="form-x").exists() and NodeBMC.objects.count() == bmcs


def test_filter_links_with_a_bad_id_are_handled(small_fleet, admin_client):
    for url in (
        reverse("admin:fleet_node_changelist") + "?rack=zz",
        reverse("admin:fleet_nodeevent_changelist") + "?node=zz",
        reverse("admin:fleet_node_export") + "?format=csv&rack=zz",
        reverse("admin:core_auditevent_changelist") + "?object_id=" + "x" * 500,
    ):
        assert admin_client.get(url).status_code in (200, 302, 400), url


# ---- the audit trail at scale -------------------------------------------------------------------


def test_the_audit_trail_is_searched_and_filtered_on_its_indexes(small_fleet, admin_client):
    node = Node.objects.order_by("hostname").first()
    other = Node.objects.order_by("hostname")[1]
    record_audit(actor="user:alice", action="node.cordon", target=node, reason="fan noise")
    record_audit(actor="user:bob", action="node.drain", target=other, reason="rack work")
    url = reverse("admin:core_auditevent_changelist")
    with CaptureQueriesContext(connection) as queries:
        listing = admin_client.get(url)
    for q in queries.captured_queries:
        sql = q["sql"].upper()
        if "CORE_AUDITEVENT" in sql:
            assert "DISTINCT" not in sql and " LIKE " not in sql, q["sql"]
            assert "COUNT(" not in sql or "LIMIT" in sql, q["sql"]
            assert "DATE_TRUNC" not in sql and "DJANGO_DATETIME_TRUNC" not in sql, q["sql"]
    choices = {
        f.title: [c["display"] for c in f.choices(listing.context["cl"])] for f in listing.context["cl"].filter_specs
    }
    assert {"node.cordon", "node.drain"} <= set(choices["action"]) and "fleet.node" in choices["object type"]

    def found(**params):
        return [e.action for e in admin_client.get(url, params).context["cl"].result_list]

    assert found(q=node.hostname) == ["node.cordon"]  # an identifier, through the search index
    assert found(q=node.hostname.upper()[:8]).count("node.cordon") == 1  # prefix, any case
    assert found(q="alice") == ["node.cordon"] and found(q="user:bob") == ["node.drain"]
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(url, {"q": "alice"})
    page = [q["sql"] for q in queries.captured_queries if "core_auditevent" in q["sql"] and "LIMIT 100" in q["sql"]]
    assert page and " OR " not in page[0]  # one condition on one index, never an OR of them
    assert found(q=str(other.pk)) == ["node.drain"]
    assert found(action="node.drain") == ["node.drain"]
    assert found(q="fan noise") == []  # free text is not searched: it has no index
    assert "node.cordon" in found(at__gte=(timezone.now() - timedelta(days=1)).strftime("%Y-%m-%d"))


def test_sortable_columns_of_the_big_lists_are_indexed():
    """Each column a big list may be sorted by leads an index of its table (or is unique), so a
    sort reads an index instead of sorting every row; every other column is not sortable."""
    big = (
        "fleet.node",
        "fleet.gpu",
        "fleet.drive",
        "fleet.nodebmc",
        "fleet.nodeevent",
        "core.auditevent",
        "fleet.sanitizationrecord",
        "fleet.nodeagentaction",
        "fleet.bmcpoweraction",
    )
    for label in big:
        model = next(m for m in admin.site._registry if m._meta.label_lower == label)
        model_admin = admin.site._registry[model]
        assert model_admin.sortable_by is not None, label
        leading = {idx.fields[0].lstrip("-") for idx in model._meta.indexes}
        for column in model_admin.sortable_by:
            field = model._meta.get_field(column)
            assert field.primary_key or field.unique or field.db_index or column in leading, (label, column)
            assert not field.is_relation, (label, column)  # a relation sorts by the other table's order
    assert all(
        isinstance(admin.site._registry[m], AtScaleAdmin) for m in admin.site._registry if m._meta.label_lower in big
    )
