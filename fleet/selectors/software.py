"""Reads of the fleet's software: each node's inventory, and drift from its type's golden baseline.

Drift is computed, never stored: a node drifts in a component when its golden baseline names a
version and the node's inventory does not show that version working (`ok`) — another version,
a component that is missing or failed. A node that has never reported its stack is counted as
`unreported`, not as drifting: nothing is known about it yet. Every read here is a fixed
number of queries whatever the fleet size.
"""

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Count, Exists, OuterRef, Q

from fleet.choices import ComponentState
from fleet.choices import Lifecycle as L
from fleet.models import Node, NodeSoftware, SoftwareBaseline

__all__ = [
    "ComponentDrift",
    "DriftGroup",
    "drift_for_nodes",
    "drift_from",
    "drift_report",
    "golden_baselines",
    "node_software",
    "off_baseline_node_ids",
    "on_golden_baseline",
]

# Nodes that have left the fleet run nothing that matters.
_GONE = (L.RETIRED, L.DISPOSED)


@dataclass(frozen=True)
class ComponentDrift:
    component: str
    expected: str
    actual: str  # "" when the node does not report it
    state: str  # the reported state, or "missing"


def golden_baselines(node_type_ids=None) -> dict:
    """node type id → its golden SoftwareBaseline (one query)."""
    qs = SoftwareBaseline.objects.filter(golden=True).select_related("node_type")
    if node_type_ids is not None:
        qs = qs.filter(node_type_id__in=list(node_type_ids))
    return {b.node_type_id: b for b in qs}


def node_software(node_id) -> list[NodeSoftware]:
    return list(NodeSoftware.objects.filter(node_id=node_id).order_by("component", "source"))


def _compare(versions: dict, rows: list) -> list[ComponentDrift]:
    """rows: (component, version, state) the node reports; any source showing the golden version
    working satisfies the component."""
    reported: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for component, version, state in rows:
        reported[component].append((version, state))
    drift = []
    for component, expected in sorted(versions.items()):
        seen = reported.get(component, [])
        if any(v == expected and s == ComponentState.OK for v, s in seen):
            continue
        actual, state = seen[0] if seen else ("", ComponentState.MISSING)
        drift.append(ComponentDrift(component, expected, actual, state))
    return drift


def drift_for_nodes(nodes: list[Node]) -> dict:
    """node id → list of ComponentDrift, or None where the node's type has no golden baseline or
    the node has reported nothing. Two queries."""
    golden = golden_baselines({n.node_type_id for n in nodes})
    covered = [n for n in nodes if n.node_type_id in golden]
    rows: dict = defaultdict(list)
    for node_id, component, version, state in NodeSoftware.objects.filter(
        node_id__in=[n.pk for n in covered]
    ).values_list("node_id", "component", "version", "state"):
        rows[node_id].append((component, version, state))
    return {
        n.pk: (_compare(golden[n.node_type_id].versions, rows[n.pk]) if n.pk in rows else None)
        if n.node_type_id in golden
        else None
        for n in nodes
    }


@dataclass
class DriftGroup:
    """One component of one node type's baseline: how many nodes run what instead."""

    component: str
    node_type: str
    baseline: str
    expected: str
    nodes_on_baseline: int = 0
    drifting: dict = field(default_factory=dict)  # actual version (or state) → [hostnames]

    @property
    def drifting_count(self) -> int:
        return sum(len(h) for h in self.drifting.values())


@dataclass
class DriftReport:
    groups: list  # DriftGroup, by component then node type
    unreported: dict  # node type slug → nodes of a type with a golden baseline that never reported
    types_without_baseline: list  # node type slugs of fleet nodes with no golden baseline

    def by_component(self) -> dict:
        out: dict = defaultdict(list)
        for group in self.groups:
            out[group.component].append(group)
        return dict(out)


def _matching(golden: dict) -> Q:
    """Rows that show a golden version working, for every type's baseline at once."""
    match = Q(pk__in=[])
    for type_id, baseline in golden.items():
        for component, version in baseline.versions.items():
            match |= Q(node__node_type_id=type_id, component=component, version=version, state=ComponentState.OK)
    return match


def drift_report() -> DriftReport:
    """The whole fleet's drift grouped by component, in four queries whatever the fleet size.
    Most nodes are on their baseline: the database counts their matching components, and only
    the rows of nodes that differ somewhere are read."""
    golden = golden_baselines()
    reported_q = Exists(NodeSoftware.objects.filter(node=OuterRef("pk")))
    nodes = list(
        Node.objects.exclude(lifecycle__in=_GONE)
        .annotate(reported=reported_q)
        .values_list("pk", "hostname", "node_type_id", "node_type__slug", "reported")
    )
    matched: dict = {}
    if golden:
        matched = dict(
            NodeSoftware.objects.filter(_matching(golden))
            .values("node_id")
            .annotate(n=Count("component", distinct=True))
            .order_by()
            .values_list("node_id", "n")
        )
    differing = [
        pk
        for pk, _h, type_id, _s, reported in nodes
        if reported and type_id in golden and matched.get(pk, 0) < len(golden[type_id].versions)
    ]
    components = {c for b in golden.values() for c in b.versions}
    rows: dict = defaultdict(list)
    if differing:
        for node_id, component, version, state in NodeSoftware.objects.filter(
            node_id__in=differing, component__in=components
        ).values_list("node_id", "component", "version", "state"):
            rows[node_id].append((component, version, state))
    differs = set(differing)
    groups: dict = {}
    unreported: dict = defaultdict(int)
    without: set = set()
    for node_id, hostname, type_id, slug, reported in nodes:
        baseline = golden.get(type_id)
        if baseline is None:
            without.add(slug)
            continue
        if not reported:
            unreported[slug] += 1
            continue
        drift = {d.component: d for d in _compare(baseline.versions, rows[node_id])} if node_id in differs else {}
        for component, expected in baseline.versions.items():
            group = groups.setdefault((component, slug), DriftGroup(component, slug, baseline.name, expected))
            if component in drift:
                d = drift[component]
                label = d.actual if d.actual and d.state == ComponentState.OK else f"{d.actual or '-'} ({d.state})"
                group.drifting.setdefault(label, []).append(hostname)
            else:
                group.nodes_on_baseline += 1
    ordered = [groups[k] for k in sorted(groups)]
    for group in ordered:
        for hosts in group.drifting.values():
            hosts.sort()
    return DriftReport(ordered, dict(unreported), sorted(without))


def off_baseline_node_ids(node_ids) -> set:
    """Which of `node_ids` are known to differ from their type's golden baseline, or have never
    reported their stack where their type has one (placement's "on baseline only" refuses both:
    a tenant who asks for it wants known-good versions). Three queries."""
    nodes = list(Node.objects.filter(pk__in=list(node_ids)).only("pk", "node_type_id"))
    drift = drift_for_nodes(nodes)
    golden_types = set(golden_baselines({n.node_type_id for n in nodes}))
    return {n.pk for n in nodes if n.node_type_id in golden_types and (drift[n.pk] is None or drift[n.pk])}


def on_golden_baseline(nodes_qs, node_type):
    """`nodes_qs` (of `node_type`) narrowed to nodes that report every component of the type's
    golden baseline working at its version; unchanged where the type has no golden baseline.
    A filter, not a read: placement composes it into its own query."""
    baseline = SoftwareBaseline.objects.filter(node_type=node_type, golden=True).only("versions").first()
    if baseline is None:
        return nodes_qs
    for component, version in baseline.versions.items():
        nodes_qs = nodes_qs.filter(
            Exists(
                NodeSoftware.objects.filter(
                    node=OuterRef("pk"), component=component, version=version, state=ComponentState.OK
                )
            )
        )
    return nodes_qs


def drift_from(nodes: list[Node], versions: dict) -> dict:
    """node id → list of ComponentDrift against `versions` (any baseline, e.g. a rollout's
    target), or None for a node that has reported nothing. One query."""
    rows: dict = defaultdict(list)
    for node_id, component, version, state in NodeSoftware.objects.filter(
        node_id__in=[n.pk for n in nodes], component__in=list(versions)
    ).values_list("node_id", "component", "version", "state"):
        rows[node_id].append((component, version, state))
    reported = set(
        NodeSoftware.objects.filter(node_id__in=[n.pk for n in nodes]).values_list("node_id", flat=True).distinct()
    )
    return {n.pk: (_compare(versions, rows[n.pk]) if n.pk in reported else None) for n in nodes}
