"""The fleet's identifiers in the console search (core.search): node hostname, serial, asset
tag, BMC address and MAC; GPU UUID and serial; drive serial; rack and hall names. A GPU or a
drive opens its node, and every hit on or in a node says the node's lifecycle, health, rack
and tenant. Tenancy's rows are read through Node's reverse relation (allocation_memberships)."""

from django.db.models import Max, Q
from django.urls import reverse

from core.search import Described, Kind, register

from .choices import Health, Lifecycle
from .models import GPU, Drive, Hall, Node, NodeBMC, Rack


def _tenant_of(prefix: str) -> Max:
    """The tenant slug on the node at `prefix` ("" for a Node itself), if it carries a live allocation."""
    memberships = f"{prefix}allocation_memberships"
    return Max(f"{memberships}__allocation__tenant__slug", filter=Q(**{f"{memberships}__ended_at__isnull": True}))


_NODE_COLUMNS = ("hostname", "lifecycle", "health", "rack__name", "rack__hall__name")


def _node_detail(row: dict, prefix: str = "") -> str:
    parts = [
        Lifecycle(row[f"{prefix}lifecycle"]).label,
        Health(row[f"{prefix}health"]).label.lower(),
        f"rack {row[f'{prefix}rack__hall__name']}/{row[f'{prefix}rack__name']}",
        f"tenant {row['tenant']}" if row["tenant"] else "no tenant",
    ]
    return " · ".join(parts)


def _node_url(node_id) -> str:
    return reverse("fleet:node-detail", args=[node_id])


def describe_nodes(ids: list[str]) -> dict[str, Described]:
    rows = Node.objects.filter(pk__in=ids).values("pk", *_NODE_COLUMNS).annotate(tenant=_tenant_of(""))
    return {str(r["pk"]): Described(r["hostname"], _node_url(r["pk"]), _node_detail(r)) for r in rows}


def _describe_parts(model, ids: list[str], what) -> dict[str, Described]:
    columns = [f"node__{c}" for c in _NODE_COLUMNS]
    rows = (
        model.objects.filter(pk__in=ids)
        .values("pk", "node_id", *what[0], *columns)
        .annotate(tenant=_tenant_of("node__"))
    )
    return {
        str(r["pk"]): Described(
            what[1](r), _node_url(r["node_id"]), f"in {r['node__hostname']} · {_node_detail(r, 'node__')}"
        )
        for r in rows
    }


def describe_gpus(ids: list[str]) -> dict[str, Described]:
    return _describe_parts(GPU, ids, (("index", "uuid"), lambda r: f"GPU {r['index']} · {r['uuid']}"))


def describe_drives(ids: list[str]) -> dict[str, Described]:
    return _describe_parts(Drive, ids, (("serial", "model"), lambda r: f"drive {r['serial']} {r['model']}".strip()))


def describe_bmcs(ids: list[str]) -> dict[str, Described]:
    """A BMC address or MAC opens the node the BMC manages."""
    return _describe_parts(NodeBMC, ids, (("address",), lambda r: f"BMC of {r['node__hostname']}"))


def describe_racks(ids: list[str]) -> dict[str, Described]:
    rows = Rack.objects.filter(pk__in=ids).values("pk", "name", "hall__name", "hall__site__slug")
    return {
        str(r["pk"]): Described(
            f"rack {r['hall__name']}/{r['name']}",
            reverse("fleet:rack-detail", args=[r["pk"]]),
            f"site {r['hall__site__slug']}",
        )
        for r in rows
    }


def describe_halls(ids: list[str]) -> dict[str, Described]:
    rows = Hall.objects.filter(pk__in=ids).values("pk", "name", "site__slug")
    return {
        str(r["pk"]): Described(f"hall {r['site__slug']}/{r['name']}", reverse("fleet:floor-map", args=[r["pk"]]), "")
        for r in rows
    }


register(
    Node,
    kinds=[
        Kind("hostname", "Hostname", "hostname"),
        Kind("node_serial", "Node serial", "serial"),
        Kind("asset_tag", "Asset tag", "asset_tag"),
    ],
    describe=describe_nodes,
)
register(
    NodeBMC,
    kinds=[Kind("bmc_address", "BMC address", "address"), Kind("bmc_mac", "BMC MAC", "mac")],
    describe=describe_bmcs,
)
register(
    GPU,
    kinds=[Kind("gpu_uuid", "GPU UUID", "uuid"), Kind("gpu_serial", "GPU serial", "serial")],
    describe=describe_gpus,
)
register(Drive, kinds=[Kind("drive_serial", "Drive serial", "serial")], describe=describe_drives)
register(Rack, kinds=[Kind("rack_name", "Rack", "name")], describe=describe_racks)
register(Hall, kinds=[Kind("hall_name", "Hall", "name")], describe=describe_halls)
