"""Software drift at scale: the drift report (page, API and /metrics) over 12,500 nodes."""

import random

from django.db import connection
from django.utils import timezone

from benchmarks.harness import Measurement, benchmark, count_queries, timed
from devtools.services.demo_software import golden_versions
from fleet.models import Node, NodeSoftware, NodeType
from fleet.selectors import drift_report
from fleet.services.baselines import create_baseline
from hangar_agent.software import SimulatedStack


def _seed_stacks() -> int:
    """Every node's stack as its agent would report it (~15 % on the previous driver)."""
    if NodeSoftware.objects.exists():
        return NodeSoftware.objects.count()
    now = timezone.now()
    rng = random.Random(27)
    rows = []
    for node_id, generation in Node.objects.values_list("pk", "node_type__generation"):
        for c in SimulatedStack(rng, generation).components():
            rows.append(NodeSoftware(node_id=node_id, source="agent", observed_at=now, received_at=now, **c))
    NodeSoftware.objects.bulk_create(rows, batch_size=5000)
    for node_type in NodeType.objects.filter(nodes__isnull=False).distinct():
        create_baseline(
            node_type=node_type, name="bench", versions=golden_versions(node_type), actor="bench", golden=True
        )
    return len(rows)


@benchmark("software drift report (12,500 nodes)", target="< 2 s, queries fixed")
def drift_at_scale() -> Measurement:
    rows = _seed_stacks()
    drift_report()
    queries = count_queries(drift_report)
    ours = timed(drift_report, repeat=3)
    with connection.cursor() as cursor:
        sql = (
            "SELECT s.node_id, s.component, s.version, s.state FROM fleet_nodesoftware s "
            "JOIN fleet_node n ON n.id = s.node_id WHERE n.lifecycle NOT IN ('retired', 'disposed')"
        )
        baseline = timed(lambda: (cursor.execute(sql), cursor.fetchall()), repeat=3)
    return Measurement(ours, baseline, queries, note=f"{rows} inventory rows; baseline = fetching them with raw SQL")
