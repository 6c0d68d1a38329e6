"""Sourced reference numbers from ``core/reference/*.csv``, loaded once and cached.

Every default the product shows (power per node, rack limits, PUE, burn-in
durations, prices ...) comes from these files so that it can be cited, never
retyped. The API is deliberately small:

``parameter(name) -> ReferenceValue``
    A row of ``facility.csv``, ``economics.csv`` or ``reliability.csv`` by its
    ``parameter`` name. ``value`` is the text as written; ``low``/``high`` are
    ``Decimal`` bounds parsed from a plain number (``"1.58"``: low == high) or a
    range (``"6-12"``), and ``None`` when the value is not numeric
    (``"64 leaf + 32 spine"``). ``source`` is the citation to show beside it.
    Unknown names raise ``KeyError``.

``generations() -> tuple[GenerationRow, ...]``
    The rows of ``generations.csv`` in file order, typed (blank kW cells are
    ``None``: rack-scale systems such as GB200-NVL72 have only a rack figure).

``generation(gpu_model) -> GenerationRow``
    One row by GPU model (e.g. ``"H100-SXM5-80GB"``, ``"GB200-NVL72"``).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from functools import cache
from pathlib import Path

REFERENCE_DIR = Path(__file__).resolve().parent / "reference"
_PARAMETER_FILES = ("facility.csv", "economics.csv", "reliability.csv", "inference.csv")
_NUMBER_OR_RANGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:-\s*(\d+(?:\.\d+)?))?\s*$")


@dataclass(frozen=True)
class ReferenceValue:
    """One sourced figure; ``low``/``high`` are None unless the value is a number or ``a-b`` range."""

    name: str
    value: str
    unit: str
    source: str
    low: Decimal | None
    high: Decimal | None
    as_of: str | None
    file: str


@dataclass(frozen=True)
class GenerationRow:
    """One GPU product of ``generations.csv`` (per-node and per-rack power, cooling, fabric)."""

    generation: str
    gpu_model: str
    form: str
    gpus_per_node: int
    node_kw: Decimal | None
    rack_kw_typical: Decimal | None
    cooling: str
    nvlink_domain_gpus: int
    nvlink_gbps_per_gpu: int
    fabric: str
    cuda_cc: str
    year: int
    source: str
    dense_bf16_tflops: Decimal | None = None
    hbm_tb_s: Decimal | None = None
    hbm_gb: Decimal | None = None
    dense_fp8_tflops: Decimal | None = None
    dense_fp4_tflops: Decimal | None = None
    training_vs_h100: Decimal | None = None
    inference_vs_h100: Decimal | None = None
    node_weight_kg: Decimal | None = None
    rack_weight_kg: Decimal | None = None
    perf_source: str = ""

    @property
    def it_kw_per_gpu(self) -> Decimal:
        """IT kW per GPU of this family: node kW / GPUs per node, or rack kW / GPUs per rack (rack-scale)."""
        if self.node_kw is not None:
            return self.node_kw / self.gpus_per_node
        assert self.rack_kw_typical is not None
        return self.rack_kw_typical / self.nvlink_domain_gpus


def _bounds(value: str) -> tuple[Decimal | None, Decimal | None]:
    match = _NUMBER_OR_RANGE.match(value)
    if match is None:
        return None, None
    low = Decimal(match.group(1))
    high = Decimal(match.group(2)) if match.group(2) else low
    return low, high


def _rows(filename: str) -> list[dict[str, str]]:
    with (REFERENCE_DIR / filename).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@cache
def _parameters() -> dict[str, ReferenceValue]:
    table: dict[str, ReferenceValue] = {}
    for filename in _PARAMETER_FILES:
        for row in _rows(filename):
            low, high = _bounds(row["value"])
            table[row["parameter"]] = ReferenceValue(
                name=row["parameter"],
                value=row["value"],
                unit=row["unit"],
                source=row["source"],
                low=low,
                high=high,
                as_of=row.get("as_of") or None,
                file=filename,
            )
    return table


def parameter(name: str) -> ReferenceValue:
    """The sourced row called ``name`` in facility/economics/reliability.csv (KeyError if absent)."""
    return _parameters()[name]


def _decimal_or_none(text: str) -> Decimal | None:
    return Decimal(text) if text.strip() else None


@cache
def generations() -> tuple[GenerationRow, ...]:
    """All rows of generations.csv, typed, in file order."""
    return tuple(
        GenerationRow(
            generation=row["generation"],
            gpu_model=row["gpu_model"],
            form=row["form"],
            gpus_per_node=int(row["gpus_per_node"]),
            node_kw=_decimal_or_none(row["node_kw"]),
            rack_kw_typical=_decimal_or_none(row["rack_kw_typical"]),
            cooling=row["cooling"],
            nvlink_domain_gpus=int(row["nvlink_domain_gpus"]),
            nvlink_gbps_per_gpu=int(row["nvlink_gbps_per_gpu"]),
            fabric=row["fabric"],
            cuda_cc=row["cuda_cc"],
            year=int(row["year"]),
            source=row["source"],
            dense_bf16_tflops=_decimal_or_none(row.get("dense_bf16_tflops", "")),
            hbm_tb_s=_decimal_or_none(row.get("hbm_tb_s", "")),
            hbm_gb=_decimal_or_none(row.get("hbm_gb", "")),
            dense_fp8_tflops=_decimal_or_none(row.get("dense_fp8_tflops", "")),
            dense_fp4_tflops=_decimal_or_none(row.get("dense_fp4_tflops", "")),
            training_vs_h100=_decimal_or_none(row.get("training_vs_h100", "")),
            inference_vs_h100=_decimal_or_none(row.get("inference_vs_h100", "")),
            node_weight_kg=_decimal_or_none(row.get("node_weight_kg", "")),
            rack_weight_kg=_decimal_or_none(row.get("rack_weight_kg", "")),
            perf_source=row.get("perf_source", ""),
        )
        for row in _rows("generations.csv")
    )


def generation(gpu_model: str) -> GenerationRow:
    """The generations.csv row for ``gpu_model`` (KeyError if absent)."""
    for row in generations():
        if row.gpu_model == gpu_model:
            return row
    raise KeyError(gpu_model)


def burn_in_deadline() -> timedelta:
    """How long a node's burn-in may take (facility.csv ``burn_in_deadline``).

    One value for both sides: the lifecycle times burn-in out after it, and the migration
    planner schedules a new rack's burn-in for it, so a plan never counts on a burn-in the
    control plane would fail.
    """
    row = parameter("burn_in_deadline")
    assert row.low is not None and row.unit == "hours"
    return timedelta(hours=float(row.low))


@cache
def table(filename: str) -> tuple[dict[str, str], ...]:
    """Every row of a tabular reference file (e.g. ``models.csv``) as written, in file order.

    For files whose rows are records rather than named parameters; the caller types the
    columns it reads. Cached: treat the rows as read-only."""
    return tuple(_rows(filename))


@dataclass(frozen=True)
class SanitisationRule:
    """NIST SP 800-88 for one kind of custody destination (``sanitisation.csv``): whether the
    media leaves the organisation's control and the weakest method that will do for every drive
    (``unpurgeable_method`` for a drive that cannot be purged)."""

    destination_kind: str
    label: str
    leaves_organisation: bool
    media_reused: bool
    minimum_method: str
    unpurgeable_method: str
    verification_required: bool
    source: str


def _yes_no(text: str, where: str) -> bool:
    if text not in ("yes", "no"):
        raise ValueError(f"{where}: expected yes or no, got {text!r}")
    return text == "yes"


@cache
def sanitisation_rules() -> dict[str, SanitisationRule]:
    """Destination kind → its NIST SP 800-88 rule, in file order (``sanitisation.csv``)."""
    rules: dict[str, SanitisationRule] = {}
    for row in _rows("sanitisation.csv"):
        kind = row["destination_kind"]
        where = f"sanitisation.csv {kind}"
        if kind in rules:
            raise ValueError(f"{where}: listed twice")
        rules[kind] = SanitisationRule(
            destination_kind=kind,
            label=row["label"],
            leaves_organisation=_yes_no(row["leaves_organisation_control"], where),
            media_reused=_yes_no(row["media_reused"], where),
            minimum_method=row["minimum_method"],
            unpurgeable_method=row["unpurgeable_method"],
            verification_required=_yes_no(row["verification_required"], where),
            source=row["source"],
        )
    return rules
