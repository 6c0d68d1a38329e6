"""Builds a realistic fleet for the demo and the scale fixture.

Shape (docs/design, issue "Foundation"): H100 nodes of 8 GPUs, two per air-cooled rack (2 ×
10.2 kW = 20.4 kW, the Meta 24k-cluster layout cited in generations.csv), one InfiniBand NDR
fabric domain per 2,048-GPU pod (the two-tier fat-tree maximum in facility.csv), every node
with its GPUs and drives; plus an empty liquid-cooled hall ready for the next generation.
Everything is written with bulk inserts so 100,000 GPUs take seconds, not minutes.
"""

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from core.ids import uuid7
from core.search import index_objects
from core.services.audit import record_audit
from fleet.catalogue import ensure_node_type_catalogue
from fleet.choices import Cooling, FabricTechnology, Health, Lifecycle, PowerState
from fleet.models import (
    GPU,
    Drive,
    FabricDomain,
    Hall,
    Node,
    NodeBMC,
    NodeEvent,
    NodeType,
    PowerFeed,
    Rack,
    Site,
)

GPUS_PER_POD = 2048  # facility.csv ndr_two_tier_fat_tree_max_endpoints
NODES_PER_RACK = 2  # 20.4 kW per air-cooled H100 rack (generations.csv)
NODES_PER_SCALABLE_UNIT = 32  # one rail-optimised leaf group: 32 nodes × 8 rails
PODS_PER_HALL = 4
AIR_RACK_FEED_AMPS = 40  # 415 V 3-phase 40 A at 80 % = 23.0 kW per feed
AIR_RACK_COOLING_KW = Decimal("24")  # within facility.csv air_cooled_rack_limit_max (40 kW)
LIQUID_RACK_KW = Decimal("140")  # facility.csv liquid_rack_capacity 120-150 kW
LIQUID_POSITIONS = 16
LIQUID_HALL_BUDGET_KW = Decimal("2400")
NEW_BUILD_PUE = Decimal("1.20")  # facility.csv pue_new_build 1.1-1.3
INDUSTRY_PUE = Decimal("1.58")  # facility.csv pue_industry_average
# DGX H100 layout: 2 OS drives + 8 data drives (self-encrypting). Both models implement NVMe
# Sanitize (block erase; crypto erase on the SEDs), so each can be purged in place.
DRIVES = [("Samsung PM9A3 1.92TB", 1920, False)] * 2 + [("Samsung PM1743 3.84TB", 3840, True)] * 8
BATCH = 5000


@dataclass(frozen=True)
class SeedResult:
    site: Site
    halls: int
    racks: int
    nodes: int
    gpus: int
    drives: int
    fabric_domains: int


def _feed_kw(amps: int) -> Decimal:
    return PowerFeed(voltage=415, amperage=amps, three_phase=True, max_utilization_pct=80).available_kw


def seed_fleet(
    *,
    gpus: int,
    site_slug: str = "dc1",
    seed: int = 7,
    actor: str = "system:seed",
    progress: Callable[[str], None] = lambda message: None,
) -> SeedResult:
    """Create a fleet of `gpus` GPUs (a multiple of 8) in a new site."""
    if gpus <= 0 or gpus % 8:
        raise ValueError("--gpus must be a positive multiple of 8 (8 GPUs per node)")
    rng = random.Random(seed)
    ensure_node_type_catalogue()
    node_types = {t.slug: t for t in NodeType.objects.all()}
    node_count = gpus // 8
    pods = -(-gpus // GPUS_PER_POD)
    halls_needed = -(-pods // PODS_PER_HALL)
    now = timezone.now()
    today = now.date()
    air_rack_kw = _feed_kw(AIR_RACK_FEED_AMPS)

    with transaction.atomic():
        # node addresses continue after the sites seeded before (they are unique fleet-wide)
        address_offset = Node.objects.count()
        site = Site.objects.create(slug=site_slug, name=f"{site_slug.upper()} campus", region="eu-north")
        halls = []
        for h in range(halls_needed):
            pods_here = min(PODS_PER_HALL, pods - h * PODS_PER_HALL)
            racks_here = pods_here * GPUS_PER_POD // 8 // NODES_PER_RACK
            halls.append(
                Hall(
                    site=site,
                    name=f"hall-{h + 1}",
                    pue=INDUSTRY_PUE,
                    # the electrical plant was sized for the racks it feeds, with 5 % headroom
                    it_power_budget_kw=(air_rack_kw * racks_here * Decimal("0.95")).quantize(Decimal("1")),
                    grid_columns=16,
                )
            )
        liquid_hall = Hall(
            site=site,
            name=f"hall-{halls_needed + 1}",
            pue=NEW_BUILD_PUE,
            it_power_budget_kw=LIQUID_HALL_BUDGET_KW,
            grid_columns=8,
        )
        Hall.objects.bulk_create([*halls, liquid_hall])
        index_objects([*halls, liquid_hall], created=True)  # bulk_create sends no post_save
        progress(f"site {site.slug}: {len(halls)} air-cooled hall(s) + 1 liquid-ready hall")

        fabrics, racks, nodes, feeds, bmc_of = [], [], [], [], []
        hopper = [node_types["h100-sxm-8x"], node_types.get("h200-sxm-8x", node_types["h100-sxm-8x"])]
        for pod in range(pods):
            hall = halls[pod // PODS_PER_HALL]
            # Scale fixtures mix H100 and H200 pods (same fabric, same generation); the demo is all H100.
            node_type = hopper[1] if pods > 1 and pod % 5 == 4 else hopper[0]
            pod_nodes = min(GPUS_PER_POD // 8, node_count - pod * GPUS_PER_POD // 8)
            fabric = FabricDomain(
                site=site,
                name=f"{site.slug}-ndr-pod{pod + 1:02d}",
                technology=FabricTechnology.IB_NDR,
                generation=node_type.generation,
                leaf_count=64,
                spine_count=32,
                max_endpoints=GPUS_PER_POD,
                nodes_per_leaf=NODES_PER_SCALABLE_UNIT,
            )
            fabrics.append(fabric)
            pod_in_hall = pod % PODS_PER_HALL
            for n in range(pod_nodes):
                rack_index = (pod_in_hall * GPUS_PER_POD // 8 + n) // NODES_PER_RACK
                if n % NODES_PER_RACK == 0:
                    rack = Rack(
                        hall=hall,
                        name=f"{hall.name}-r{rack_index + 1:04d}",
                        row=rack_index // hall.grid_columns,
                        column=rack_index % hall.grid_columns,
                        u_height=42,
                        rated_power_kw=air_rack_kw,
                        cooling=Cooling.AIR,
                        cooling_capacity_kw=AIR_RACK_COOLING_KW,
                    )
                    racks.append(rack)
                    feeds += [
                        PowerFeed(rack=rack, name=side, voltage=415, amperage=AIR_RACK_FEED_AMPS) for side in "AB"
                    ]
                global_index = pod * GPUS_PER_POD // 8 + n
                bmc_of.append(
                    (
                        f"10.{64 + global_index // 65536}.{(global_index // 256) % 256}.{global_index % 256}",
                        # locally administered (02:…): never a real vendor's MAC
                        "02:48:47:" + ":".join(f"{(global_index >> s) & 0xFF:02x}" for s in (16, 8, 0)),
                    )
                )
                nodes.append(
                    Node(
                        id=uuid7(),
                        hostname=f"{site.slug}-gpu{global_index + 1:05d}",
                        serial=f"SN{rng.getrandbits(40):010X}",
                        rack=rack,
                        u_position=2 + (n % NODES_PER_RACK) * 10,
                        node_type=node_type,
                        fabric_domain=fabric,
                        leaf_switch=f"pod{pod + 1:02d}-su{n // NODES_PER_SCALABLE_UNIT + 1:02d}",
                        asset_tag=f"{site.slug.upper()}-AT{global_index + 1:07d}",
                        # BMCs on 10.64/10, the hosts' management network on 10.128/10, the
                        # data plane tenants ssh to on 10.192/10 (RFC 1918 space)
                        management_address=_address(128, address_offset + global_index + 1),
                        data_address=_address(192, address_offset + global_index + 1),
                        commissioned_on=today - timedelta(days=900 + rng.randint(0, 240)),
                        lifecycle=Lifecycle.AVAILABLE,
                        power_state=PowerState.ON,
                        health=Health.HEALTHY,
                    )
                )
        for index in range(LIQUID_POSITIONS):
            racks.append(
                Rack(
                    hall=liquid_hall,
                    name=f"{liquid_hall.name}-r{index + 1:04d}",
                    row=index // 8,
                    column=index % 8,
                    u_height=48,
                    rated_power_kw=LIQUID_RACK_KW,
                    cooling=Cooling.LIQUID,
                    cooling_capacity_kw=LIQUID_RACK_KW,
                )
            )
        FabricDomain.objects.bulk_create(fabrics)
        Rack.objects.bulk_create(racks, batch_size=BATCH)
        index_objects(racks, created=True)
        PowerFeed.objects.bulk_create(feeds, batch_size=BATCH)
        progress(f"{len(fabrics)} fabric domain(s), {len(racks)} racks")
        for start in range(0, len(nodes), BATCH):
            Node.objects.bulk_create(nodes[start : start + BATCH])
            index_objects(nodes[start : start + BATCH], created=True)
            # where each node's BMC is: its BMC record (no Redfish URL or credentials yet)
            bmcs = [
                NodeBMC(node=node, address=address, mac=mac)
                for node, (address, mac) in zip(
                    nodes[start : start + BATCH], bmc_of[start : start + BATCH], strict=True
                )
            ]
            NodeBMC.objects.bulk_create(bmcs)
            index_objects(bmcs, created=True)
            progress(f"nodes {min(start + BATCH, len(nodes))}/{len(nodes)}")

        gpu_rows, drive_rows = [], []
        gpu_total = drive_total = 0
        for i, node in enumerate(nodes):
            for index in range(node.node_type.gpus_per_node):
                gpu_rows.append(
                    GPU(
                        id=uuid7(),
                        node_id=node.id,
                        index=index,
                        uuid=f"GPU-{uuid.UUID(int=rng.getrandbits(128), version=4)}",
                        serial=f"{rng.getrandbits(44):013d}",
                    )
                )
            for model, capacity, sed in DRIVES:
                drive_rows.append(
                    Drive(
                        id=uuid7(),
                        node_id=node.id,
                        serial=f"S6{rng.getrandbits(48):012X}",
                        model=model,
                        capacity_gb=capacity,
                        self_encrypting=sed,
                        purge_supported=True,
                    )
                )
            if len(gpu_rows) >= BATCH or i == len(nodes) - 1:
                GPU.objects.bulk_create(gpu_rows)
                Drive.objects.bulk_create(drive_rows)
                index_objects([*gpu_rows, *drive_rows], created=True)
                gpu_total += len(gpu_rows)
                drive_total += len(drive_rows)
                gpu_rows, drive_rows = [], []
                progress(f"gpus {gpu_total}/{gpus}, drives {drive_total}")
        NodeEvent.objects.bulk_create(
            [
                NodeEvent(
                    node_id=node.id,
                    at=now,
                    actor=actor,
                    action="seed",
                    from_state="",
                    to_state=Lifecycle.AVAILABLE,
                    reason="seeded into service",
                )
                for node in nodes
            ],
            batch_size=BATCH,
        )
        record_audit(
            actor=actor,
            action="fleet.seed",
            target=site,
            after={"gpus": gpus, "nodes": len(nodes), "racks": len(racks)},
        )
    return SeedResult(
        site=site,
        halls=len(halls) + 1,
        racks=len(racks),
        nodes=len(nodes),
        gpus=gpu_total,
        drives=drive_total,
        fabric_domains=len(fabrics),
    )


def seed_demo_fleet(stdout) -> None:
    """The demo's 2,048-GPU fleet, once."""
    if Node.objects.exists():
        stdout.write("  fleet already seeded")
        return
    result = seed_fleet(gpus=2048, progress=lambda message: stdout.write(f"  {message}"))
    stdout.write(f"  seeded {result.gpus} GPUs in {result.nodes} nodes")


def _address(base: int, index: int) -> str:
    return f"10.{base + index // 65536}.{(index // 256) % 256}.{index % 256}"
