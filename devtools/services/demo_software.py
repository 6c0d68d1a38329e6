"""The demo's software: a golden baseline per node type, each node's stack as its agent would
report it (some still on the previous driver branch, so the drift page and /metrics show
drift before the simulator has even started), and a release candidate to roll out."""

import random
import zlib

from django.db import transaction
from django.utils import timezone

from fleet.models import Node, NodeSoftware, NodeType, SoftwareBaseline
from fleet.services.baselines import create_baseline
from fleet.services.bring_up import has_nvswitch
from fleet.services.software_inventory import Component, store_software_inventory
from hangar_agent.software import CUDA_OF_DRIVER, DRIVERS, NCCL, SimulatedStack

ACTOR = "system:demo"
GOLDEN_NAME = "2026.11"
# The next branch, published for the newest generation only: rolling it onto an older type fails
# at the canary ("package not found in the repository"), which is what the demo shows.
CANDIDATE_NAME = "2026.12-rc"


def golden_versions(node_type: NodeType) -> dict:
    driver = DRIVERS[node_type.generation][-1]
    versions = {"gpu_driver": driver, "cuda": CUDA_OF_DRIVER[driver.split(".")[0]], "nccl": NCCL[-1]}
    if has_nvswitch(node_type):
        versions["fabric_manager"] = driver
    return versions


@transaction.atomic
def seed_demo_software(stdout) -> None:
    if SoftwareBaseline.objects.exists():
        stdout.write("  software baselines already seeded")
        return
    types = list(NodeType.objects.filter(nodes__isnull=False).distinct())
    for node_type in types:
        if node_type.generation not in DRIVERS:
            continue
        create_baseline(
            node_type=node_type, name=GOLDEN_NAME, versions=golden_versions(node_type), actor=ACTOR, golden=True
        )
        newest = DRIVERS["blackwell-ultra"][-1]
        create_baseline(
            node_type=node_type,
            name=CANDIDATE_NAME,
            versions={**golden_versions(node_type), "gpu_driver": newest, "cuda": CUDA_OF_DRIVER[newest.split(".")[0]]},
            actor=ACTOR,
        )
    now = timezone.now()
    seeded = 0
    for node in Node.objects.select_related("node_type").filter(software__isnull=True).order_by("hostname"):
        if node.node_type.generation not in DRIVERS:
            continue
        stack = SimulatedStack(random.Random(zlib.crc32(node.hostname.encode())), node.node_type.generation)
        store_software_inventory(node=node, components=[Component(**c) for c in stack.components()], observed_at=now)
        seeded += 1
    old = NodeSoftware.objects.filter(component="gpu_driver").exclude(
        version__in=[DRIVERS[t.generation][-1] for t in types if t.generation in DRIVERS]
    )
    stdout.write(f"  software: {len(types)} golden baselines, {seeded} stacks, {old.count()} nodes on an older driver")
