"""The NodeType catalogue, built from core/reference/generations.csv (with its sources).

Used by the data migration that preloads the catalogue and by seed_fleet; the figures are
read from the reference file, never retyped.
"""

import csv
from decimal import Decimal
from pathlib import Path

from fleet.models import NodeType

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "core" / "reference"
NVL72_TRAYS_PER_RACK = 18  # GB200/GB300 NVL72: 18 compute trays × 4 GPUs (generations.csv "form")

# What the CSV does not say: instance-type names and chassis heights (vendor user guides).
_SLUGS = {
    "A100-SXM4-80GB": ("a100-sxm-8x", 6),
    "H100-SXM5-80GB": ("h100-sxm-8x", 8),
    "H200-SXM5-141GB": ("h200-sxm-8x", 8),
    "B200-SXM6-180GB": ("b200-sxm-8x", 10),
    "GB200-NVL72": ("gb200-nvl72", 1),
    "B300-SXM": ("b300-sxm-8x", 10),
    "GB300-NVL72": ("gb300-nvl72", 1),
}


def catalogue_rows(reference_dir: Path = REFERENCE_DIR) -> list[dict]:
    """One dict of NodeType fields per generations.csv row."""
    rows = []
    with open(reference_dir / "generations.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            slug, u_height = _SLUGS[row["gpu_model"]]
            rack_kw = Decimal(row["rack_kw_typical"]) if row["rack_kw_typical"] else None
            if row["node_kw"]:
                node_kw = Decimal(row["node_kw"])
                rack_scale_kw = None
            else:
                node_kw = (rack_kw / NVL72_TRAYS_PER_RACK).quantize(Decimal("0.01"))
                rack_scale_kw = rack_kw
            rows.append(
                {
                    "slug": slug,
                    "vendor_model": row["form"],
                    "gpu_model": row["gpu_model"],
                    "generation": row["generation"],
                    "gpus_per_node": int(row["gpus_per_node"]),
                    "node_kw": node_kw,
                    "rack_kw": rack_scale_kw,
                    "cooling_requirement": row["cooling"],
                    "u_height": u_height,
                    "cuda_compute_capability": row["cuda_cc"],
                    "nvlink_domain_gpus": int(row["nvlink_domain_gpus"]),
                    "fabric": row["fabric"],
                    "year": int(row["year"]),
                    "source": f"generations.csv: {row['source']}",
                }
            )
    return rows


def ensure_node_type_catalogue() -> int:
    """Load any catalogue rows that are missing (after a flush, or a database built without the
    data migration). Returns how many were created; existing rows are left as they are."""

    existing = set(NodeType.objects.values_list("slug", flat=True))
    missing = [NodeType(**row) for row in catalogue_rows() if row["slug"] not in existing]
    NodeType.objects.bulk_create(missing)
    return len(missing)
