"""The admin at 100,000 GPUs and 1,000,000 audit rows (docs/admin.md "At scale"; issue 42).

Every page a person opens there — the audit trail (its list, each filter, each search, one
object's rows), the node page and list, the GPU, drive, BMC and node-event lists — timed as the
median of 5 requests through Django's test client, as a staff user holding model permissions
(not a superuser: their permission checks are queries too), with its query count, next to the
raw SQL of the page's main SELECT. And the upload bombs of the import, each refused.

The fixture (`audit1m`) is the 12,500-node "scale" fleet plus 1,000,000 audit rows spread over
two years (`BENCH_AUDIT_ROWS` sets how many), a BMC record per node, and a node that served a
tenant (its page reads its drives' sanitisation)."""

import io
import os
import random
import time
import uuid
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.utils import timezone

from benchmarks.bench_search import admin_row
from benchmarks.harness import Measurement, benchmark, timed
from core.models import AuditEvent
from fleet.inventory_files import read_workbook
from fleet.models import Node, NodeBMC
from tests.fleet import xlsx_bombs  # the test suite's builders: the same files the tests refuse

FIXTURE = "audit1m"
SUFFIX = "(12,500 nodes, 1,000,000 audit rows)"  # benchmarks.fixtures.ALONE selects these rows by it
AUDIT_ROWS = int(os.environ.get("BENCH_AUDIT_ROWS", 1_000_000))
TARGET = "<= 300 ms"
BATCH = 10_000
ACTIONS = [
    *(f"node.{verb}" for verb in ("cordon", "uncordon", "drain", "admin_update", "import_update", "bmc_set")),
    *(f"{model}.admin_{verb}" for model in ("rack", "gpu", "drive", "hall") for verb in ("create", "update", "delete")),
    "node.admin_export",
    "node.admin_refused",
    "user.admin_update",
    "periodictask.admin_update",
    "allocation.create",
    "token.create",
]
TYPES = ["fleet.node"] * 7 + ["fleet.gpu", "fleet.drive", "fleet.rack"]


def load() -> None:
    """Add the audit rows, BMC records and a served node to the scale fleet (each once)."""
    nodes = list(Node.objects.order_by("hostname").values_list("pk", flat=True))
    if not NodeBMC.objects.exists():
        NodeBMC.objects.bulk_create(
            [
                NodeBMC(
                    node_id=pk,
                    redfish_url=f"https://10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                    username_encrypted="x",
                    password_encrypted="x",
                )
                for i, pk in enumerate(nodes)
            ],
            batch_size=BATCH,
        )
    served = Node.objects.order_by("-hostname").first()  # the node the node-page row opens
    memberships = Node._meta.get_field("allocation_memberships").related_model
    if not memberships.objects.filter(node=served).exists():
        allocations = memberships._meta.get_field("allocation").related_model
        tenants = allocations._meta.get_field("tenant").related_model
        tenant, _ = tenants.objects.get_or_create(slug="bench-tenant", defaults={"name": "Bench tenant"})
        allocation = allocations.objects.create(
            tenant=tenant, name="bench", instance_type=served.node_type, node_count=1
        )
        memberships.objects.create(
            allocation=allocation,
            node=served,
            started_at=timezone.now() - timedelta(days=30),
            ended_at=timezone.now() - timedelta(days=29),
        )
    have = AuditEvent.objects.count()
    rng = random.Random(42)
    now = timezone.now()
    span = timedelta(days=730).total_seconds()
    started = time.monotonic()
    for start in range(have, AUDIT_ROWS, BATCH):
        rows = []
        for _ in range(min(BATCH, AUDIT_ROWS - start)):
            kind = rng.choice(TYPES)
            rows.append(
                AuditEvent(
                    at=now - timedelta(seconds=rng.random() * span),
                    actor=f"user:op{rng.randrange(200)}"
                    if rng.random() < 0.7
                    else f"system:{rng.choice(['reconciler', 'health', 'allocator'])}",
                    action=rng.choice(ACTIONS),
                    object_type=kind,
                    object_id=str(rng.choice(nodes)) if kind == "fleet.node" else str(uuid.uuid4()),
                    after={"bench": True},
                    reason="bench",
                    request_id=uuid.uuid4().hex,
                )
            )
        AuditEvent.objects.bulk_create(rows, batch_size=BATCH)
        if start // BATCH % 20 == 0:
            print(f"  audit rows: {start + len(rows):,} ({time.monotonic() - started:.0f} s)", flush=True)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE core_auditevent; ANALYZE fleet_node; ANALYZE fleet_nodebmc")


def _client() -> Client:
    user = get_user_model().objects.filter(username="bench-inventory").first()
    if user is None:
        user = get_user_model().objects.create_user("bench-inventory", password="x" * 16, is_staff=True)
        codes = [f"{a}_{m}" for a in ("view", "add", "change") for m in ("node", "gpu", "drive", "nodebmc")]
        user.user_permissions.set(Permission.objects.filter(codename__in=[*codes, "view_auditevent", "view_nodeevent"]))
    client = Client()
    client.force_login(user)
    return client


def _row(url: str, baseline_sql: str, params, note: str) -> Measurement:
    return admin_row(url, baseline_sql, params, note, client=_client())


def _sample_node():
    return Node.objects.order_by("-hostname").first()


AUDIT_PAGE = "SELECT * FROM core_auditevent {where} ORDER BY at DESC, id DESC LIMIT 100"


def _audit(name: str, url_params: str, where: str, params, note: str):
    @benchmark(f"admin audit {name} {SUFFIX}", fixture=FIXTURE, target=TARGET)
    def run() -> Measurement:
        node = _sample_node()
        values = {"hostname": node.hostname, "node_id": str(node.pk)}
        return _row(
            "/admin/core/auditevent/" + url_params.format(**values),
            AUDIT_PAGE.format(where=where),
            [p.format(**values) for p in params],
            note + "; baseline = the page's SELECT",
        )

    return run


_audit("list, page of 100", "", "", [], "newest first, count capped at 10,001")
_audit("filter by action", "?action=node.drain", "WHERE action = %s", ["node.drain"], "index (action, at, id)")
_audit(
    "filter by object type",
    "?object_type=fleet.gpu",
    "WHERE object_type = %s",
    ["fleet.gpu"],
    "index (object_type, at, id)",
)
_audit(
    "filter by date (past 7 days)",
    "?at__gte={week_ago}".replace("{week_ago}", (timezone.now() - timedelta(days=7)).strftime("%Y-%m-%d")),
    "WHERE at >= %s",
    [(timezone.now() - timedelta(days=7)).strftime("%Y-%m-%d")],
    "a range on the at index; no year drill",
)
_audit(
    "search by hostname",
    "?q={hostname}",
    "WHERE object_type = 'fleet.node' AND object_id = %s",
    ["{node_id}"],
    "through the search index to the node's id, then (object_type, object_id, at)",
)
_audit("search by actor", "?q=op7", "WHERE actor = %s", ["user:op7"], "exact, index (actor, at, id)")
_audit(
    "one object's rows (the node page's link)",
    "?object_type=fleet.node&object_id={node_id}",
    "WHERE object_type = 'fleet.node' AND object_id = %s",
    ["{node_id}"],
    "index (object_type, object_id, at)",
)


@benchmark(f"admin node change page, served node {SUFFIX}", fixture=FIXTURE, target=f"{TARGET}, <= 12 queries")
def node_page() -> Measurement:
    node = _sample_node()
    return _row(
        f"/admin/fleet/node/{node.pk}/change/",
        "SELECT * FROM fleet_node n JOIN fleet_gpu g ON g.node_id = n.id WHERE n.id = %s",
        [node.pk],
        "8 GPUs, 10 drives inline, links to BMC/console/audit/history; staff user with permissions; "
        "baseline = the node with its GPUs",
    )


def _list(name: str, url: str, baseline: str, note: str):
    @benchmark(f"admin {name} {SUFFIX}", fixture=FIXTURE, target=TARGET)
    def run() -> Measurement:
        return _row(url, baseline, [], note)

    return run


_list(
    "node list, page of 100 with tenant and hall",
    "/admin/fleet/node/",
    "SELECT * FROM fleet_node n JOIN fleet_rack r ON r.id = n.rack_id ORDER BY n.hostname LIMIT 100",
    "tenant read once per page",
)
_list(
    "node list, drain pending",
    "/admin/fleet/node/?drain_pending=yes",
    "SELECT * FROM fleet_node WHERE drain_requested_at IS NOT NULL ORDER BY hostname LIMIT 100",
    "partial index fleet_node_drain_pending_idx",
)
_list(
    "GPU list sorted by UUID (100,000 GPUs)",
    "/admin/fleet/gpu/?o=1",
    "SELECT * FROM fleet_gpu ORDER BY uuid LIMIT 100",
    "the only sortable column: unique",
)
_list(
    "drive list sorted by serial (125,000 drives)",
    "/admin/fleet/drive/?o=0",
    "SELECT * FROM fleet_drive ORDER BY serial LIMIT 100",
    "the only sortable column: unique",
)
_list(
    "BMC record list (12,500 records)",
    "/admin/fleet/nodebmc/",
    "SELECT * FROM fleet_nodebmc b JOIN fleet_node n ON n.id = b.node_id ORDER BY b.id DESC LIMIT 100",
    "count capped at 10,001",
)
_list(
    "node event list",
    "/admin/fleet/nodeevent/",
    "SELECT * FROM fleet_nodeevent ORDER BY at DESC, id DESC LIMIT 100",
    "index (at, id)",
)


@benchmark(f"admin one node's events {SUFFIX}", fixture=FIXTURE, target=TARGET)
def node_events() -> Measurement:
    node = _sample_node()
    return _row(
        f"/admin/fleet/nodeevent/?node={node.pk}",
        "SELECT * FROM fleet_nodeevent WHERE node_id = %s ORDER BY at DESC LIMIT 100",
        [node.pk],
        "index (node, -at)",
    )


def _bombs() -> dict:
    return {
        "200 MB shared string (201 KB file)": xlsx_bombs.huge_shared_string(),
        "A1:XFD1048576 with a far cell": xlsx_bombs.far_cell(),
        "1,048,575 empty rows": xlsx_bombs.empty_rows(),
        "billion laughs": xlsx_bombs.entity_file(),
    }


for _name in (
    "200 MB shared string (201 KB file)",
    "A1:XFD1048576 with a far cell",
    "1,048,575 empty rows",
    "billion laughs",
):

    @benchmark(f"import refuses upload bomb: {_name}", fixture="empty", target="< 1 s, worker < 300 MB")
    def bomb(name=_name) -> Measurement:
        data = _bombs()[name]
        book = read_workbook("bomb.xlsx", data, csv_sheet="nodes", max_rows=60_000)
        assert book.problems, name
        ours = timed(
            lambda: read_workbook("bomb.xlsx", io.BytesIO(data).getvalue(), csv_sheet="nodes", max_rows=60_000),
            repeat=3,
        )
        return Measurement(
            ours,
            note=f"{len(data):,} bytes; stopped after {book.stats.rows:,} rows, {book.stats.inflated_bytes:,} bytes inflated",
        )
