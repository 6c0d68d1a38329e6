"""`manage.py twin`: a simulated year of this fleet's failures, priced in goodput, SLA credits,
spares and technician-hours, with variants compared side by side (docs/twin.md).

The command never writes to the live databases. It reads the live inventory (how many nodes
of which type) when no `--gpus`/`--nodes` is given, then starts itself again as a child
process whose DATABASE_URL and LEDGER_DATABASE_URL name two new SQLite files in a temporary
folder (the twin database): the child migrates them, seeds the fleet, replays the failures
through the real health ingest and sweep on a simulated clock, and writes its report there.
The parent streams the child's progress, copies the report out and deletes the folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from core import clock
from devtools.twin import (
    MAX_DAYS,
    MAX_NODES,
    MAX_VARIANTS,
    TwinSpec,
    compare,
    llama3_comparison,
    report_csv,
    run_variant,
    spares_needed,
    summary_lines,
)

REPORT = "report.json"


class Command(BaseCommand):
    help = "Replay a simulated year (or --days) of failures over this fleet in a separate database and report goodput, credits, spares."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=float, default=365.0, help=f"simulated days (≤ {MAX_DAYS})")
        parser.add_argument("--gpus", type=int, default=None, help="a hypothetical fleet of this many GPUs")
        parser.add_argument("--nodes", type=int, default=None, help="a hypothetical fleet of this many nodes")
        parser.add_argument(
            "--node-type", default=None, help="the hypothetical fleet's instance type, e.g. gb200-nvl72"
        )
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--spares", type=float, default=None, help="share of nodes kept as spares (e.g. 0.04)")
        parser.add_argument("--burn-in-days", type=float, default=None)
        parser.add_argument("--checkpoint-minutes", type=float, default=None)
        parser.add_argument("--job-mix", default=None, help="NAME:SHARE:NODES,... e.g. large:0.75:64,small:0.25:4")
        parser.add_argument(
            "--variant",
            action="append",
            default=[],
            metavar="NAME:KEY=VALUE[,KEY=VALUE]",
            help='a variant of the same seed, e.g. "2% spares:spare_fraction=0.02" (repeatable)',
        )
        parser.add_argument(
            "--detection",
            choices=("replayed", "modelled"),
            default="replayed",
            help="replayed: each failure goes through the real health ingest and sweep in the twin database",
        )
        parser.add_argument(
            "--wait-target",
            type=float,
            default=None,
            help="also find the fewest spares keeping every job's wait for a replacement within this many hours",
        )
        parser.add_argument(
            "--compare-llama3",
            action="store_true",
            help="print the failures beside the Llama 3 paper's table (automatic for --days 54 --gpus 16384)",
        )
        parser.add_argument("--json", dest="json_path", default=None, help="write the report as JSON here")
        parser.add_argument("--csv", dest="csv_path", default=None, help="write one row per variant here")
        parser.add_argument("--inside", default=None, help="(internal) run as the child on the twin database")
        parser.add_argument("--terms", default=None, help="(internal) the live price, SLA rate, cap and SKU")

    def handle(self, *args, **options):
        spec, variants = self._plan(options)
        llama = options["compare_llama3"] or (spec.days == 54 and spec.nodes * spec.gpus_per_node == 16384)
        if llama:
            # the published rate already holds the early-life failures: no extra ones on top
            spec = replace(spec, infant_failure_share=0.0)
        target = options["wait_target"]
        if target is not None and not 0 <= target <= 24 * 365:
            raise CommandError("--wait-target must be within 0..8760 hours.")
        if options["inside"]:
            self._child(Path(options["inside"]), spec, variants, options["detection"])
            return
        began = time.monotonic()
        if options["detection"] == "modelled":
            report = self._run(spec, variants, detector_factory=None)
        else:
            report = self._in_twin_database(spec, options)
        if target is not None:
            for variant, (name, changes) in zip(report["variants"], variants, strict=True):
                self.stdout.write(f"{name}: finding the spares that keep every wait within {target:g} h…")
                variant["spares_needed"] = spares_needed(spec.with_changes(changes) if changes else spec, target)
                variant["wait_target_hours"] = target
        report["wall_seconds"] = round(time.monotonic() - began, 1)
        if llama:
            report["llama3"] = llama3_comparison(_result(report["variants"][0]))
        self._write(report, options)

    # ---- the plan ------------------------------------------------------------------------

    def _plan(self, options) -> tuple[TwinSpec, list[tuple[str, str]]]:
        given = {"days": options["days"], "seed": options["seed"]}
        if options["gpus"] is not None and options["nodes"] is not None:
            raise CommandError("Give --gpus or --nodes, not both.")
        if options["gpus"] is not None:
            if options["gpus"] <= 0 or options["gpus"] % 8:
                raise CommandError("--gpus must be a positive multiple of 8 (8 GPUs per node).")
            given["nodes"] = options["gpus"] // 8
        elif options["nodes"] is not None:
            given["nodes"] = options["nodes"]
        else:
            given.update(_live_inventory())
        if options["node_type"]:
            given.update(_node_type(options["node_type"]))
        if options["terms"]:  # the child: what the parent read from the live databases
            terms = json.loads(options["terms"])
            for key in ("price_per_gpu_hour", "sla_credit_rate", "sla_cap_percent"):
                terms[key] = Decimal(terms[key])
            given.update(terms)
        else:
            given.update(_live_terms(given.get("sku", "h100-sxm-8x")))
        for option, key in (
            ("spares", "spare_fraction"),
            ("burn_in_days", "burn_in_days"),
            ("checkpoint_minutes", "checkpoint_minutes"),
            ("job_mix", "job_mix"),
        ):
            if options[option] is not None:
                given[key] = options[option]
        if not 1 <= given["nodes"] <= MAX_NODES:
            raise CommandError(f"The twin takes 1..{MAX_NODES:,} nodes.")
        try:
            spec = TwinSpec.from_reference(**given)
            variants = [("baseline", "")]
            for item in options["variant"]:
                name, sep, changes = item.partition(":")
                if not sep or not name.strip():
                    raise ValueError(f"--variant {item!r}: write it as NAME:KEY=VALUE[,KEY=VALUE]")
                spec.with_changes(changes)  # refused here, before anything runs
                variants.append((name.strip(), changes))
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if len(variants) > MAX_VARIANTS:
            raise CommandError(f"At most {MAX_VARIANTS - 1} variants besides the baseline.")
        return spec, variants

    # ---- the parent: a database of its own ---------------------------------------------

    def _in_twin_database(self, spec: TwinSpec, options) -> dict:
        folder = Path(tempfile.mkdtemp(prefix="twin-", dir=settings.VAR_DIR))
        # Nothing the child could reach of the live system: its own databases and var folder (so
        # its own filesystem broker and handoff folder), no shared cache, no live broker.
        inherited = {
            k: v
            for k, v in os.environ.items()
            if k not in ("CELERY_BROKER_URL", "AGENT_HANDOFF_DIR") and not k.startswith("CELERY_")
        }
        env = {
            **inherited,
            "DATABASE_URL": f"sqlite:///{folder / 'twin.sqlite3'}",
            "LEDGER_DATABASE_URL": f"sqlite:///{folder / 'twin-ledger.sqlite3'}",
            "HANGAR_VAR_DIR": str(folder),
            "REDIS_URL": "",
            "DEBUG": os.environ.get("DEBUG", "true"),
        }
        argv = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "twin", "--inside", str(folder)]
        argv += ["--nodes", str(spec.nodes), "--days", str(spec.days), "--seed", str(spec.seed)]
        if options["compare_llama3"]:
            argv.append("--compare-llama3")
        for option, key in (
            ("--spares", "spare_fraction"),
            ("--burn-in-days", "burn_in_days"),
            ("--checkpoint-minutes", "checkpoint_minutes"),
            ("--job-mix", "job_mix"),
        ):
            argv += [option, str(getattr(spec, key))]
        for item in options["variant"]:
            argv += ["--variant", item]
        terms = {
            key: str(getattr(spec, key))
            for key in ("price_per_gpu_hour", "sla_credit_rate", "sla_cap_percent", "sku", "generation")
        }
        argv += ["--terms", json.dumps({**terms, "gpus_per_node": spec.gpus_per_node})]
        self.stdout.write(f"Twin database: {folder} (dropped when the run ends)")
        try:
            with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as child:
                for line in child.stdout:
                    self.stdout.write(line.rstrip("\n"))
            if child.returncode:
                raise CommandError(f"The twin stopped (exit {child.returncode}); its output is above.")
            return json.loads((folder / REPORT).read_text())
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    # ---- the child: migrate, seed, replay -----------------------------------------------

    def _child(self, folder: Path, spec: TwinSpec, variants, detection: str) -> None:
        if not str(settings.DATABASES["default"]["NAME"]).startswith(str(folder)):
            raise CommandError("--inside runs only on its own twin database (the parent sets it).")
        self.stdout.write("Creating the twin database (migrations)…")
        call_command("migrate", verbosity=0, interactive=False)
        call_command("migrate", database="ledger", verbosity=0, interactive=False)
        self.stdout.write(f"Seeding {spec.nodes:,} nodes of {spec.sku}…")
        _seed_nodes(spec)
        report = self._run(spec, variants, detector_factory=_replay_factory if detection == "replayed" else None)
        (folder / REPORT).write_text(json.dumps(report))

    def _run(self, spec: TwinSpec, variants, detector_factory) -> dict:
        results = []
        detector = detector_factory(spec) if detector_factory else None
        for name, changes in variants:
            variant = spec.with_changes(changes) if changes else spec
            if detector is not None:
                detector.reset(variant.start)
            result = run_variant(
                variant,
                name=name,
                changes=changes,
                detector=detector,
                detection="replayed: real health ingest + sweep" if detector else "modelled",
                progress=self.stdout.write,
            )
            if detector is not None:
                result.detection += f" ({dict(Counter(detector.outcomes))})"
                detector.outcomes.clear()
            results.append(result)
        return compare(results)

    def _write(self, report: dict, options) -> None:
        results = [_result(v) for v in report["variants"]]
        for line in summary_lines(results):
            self.stdout.write(line)
        if "llama3" in report:
            self.stdout.write("Against the Llama 3 paper (Table 5; bounds: Poisson, 99.9 % per row):")
            self.stdout.write(f"  {'cause':<24} {'paper':>7} {'twin':>5}  bounds")
            for row in report["llama3"]:
                verdict = "within" if row["within"] else "OUTSIDE"
                self.stdout.write(
                    f"  {row['cause']:<24} {row['paper']:>7} {row['twin']:>5}  {row['low']}-{row['high']} {verdict}"
                )
        self.stdout.write(f"Wall time {report['wall_seconds']} s.")
        latest = Path(settings.VAR_DIR) / "twin" / "latest.json"
        latest.parent.mkdir(parents=True, exist_ok=True)
        latest.write_text(json.dumps({**report, "finished_at": clock.now().isoformat()}))
        if options["json_path"]:
            Path(options["json_path"]).write_text(json.dumps(report, indent=2))
        if options["csv_path"]:
            Path(options["csv_path"]).write_text(report_csv(results))


def _result(data: dict):
    from decimal import Decimal

    from devtools.twin import VariantResult

    return VariantResult(**{**data, "sla_credits": Decimal(data["sla_credits"])})


def _live_inventory() -> dict:
    """How many live nodes of the most common type (read only)."""
    from devtools.simulator import GONE
    from fleet.models import Node

    try:
        counts = Counter(
            Node.objects.exclude(lifecycle__in=GONE).values_list(
                "node_type__slug", "node_type__generation", "node_type__gpus_per_node"
            )
        )
    except DatabaseError as exc:
        raise CommandError(f"Cannot read the live inventory ({exc}): give --gpus or --nodes.") from None
    if not counts:
        raise CommandError("The fleet has no live nodes: give --gpus or --nodes for a hypothetical fleet.")
    (slug, generation, gpus), _ = counts.most_common(1)[0]
    return {"nodes": sum(counts.values()), "sku": slug, "generation": generation, "gpus_per_node": gpus}


def _live_terms(sku: str) -> dict:
    """The list price of `sku` and the default SLA policy in force now, read from the live
    ledger (read only); the reference defaults when it has none."""
    from billing.models import SlaPolicy
    from billing.services.rating import PriceBook

    terms = {}
    now = clock.now()
    try:
        price = PriceBook.load().price_at(sku, now)
        policy = SlaPolicy.objects.filter(tenant_id__isnull=True, effective_from__lte=now).order_by("-version").first()
    except DatabaseError:  # no ledger here (a fresh checkout): the reference defaults, said in the spec
        return terms
    if price is not None:
        terms["price_per_gpu_hour"] = price.unit_price
    if policy is not None:
        terms["sla_credit_rate"] = policy.credit_rate
        terms["sla_cap_percent"] = policy.cap_percent
    return terms


def _node_type(slug: str) -> dict:
    from fleet.models import NodeType

    try:
        found = NodeType.objects.filter(slug=slug).values("slug", "generation", "gpus_per_node").first()
    except DatabaseError as exc:
        raise CommandError(f"Cannot read the instance-type catalogue ({exc}); run manage.py migrate first.") from None
    if found is None:
        known = ", ".join(NodeType.objects.order_by("slug").values_list("slug", flat=True))
        raise CommandError(f"--node-type {slug!r} is not in the catalogue; one of: {known}")
    return {"sku": found["slug"], "generation": found["generation"], "gpus_per_node": found["gpus_per_node"]}


def _seed_nodes(spec: TwinSpec) -> None:
    """`seed_fleet`'s racks and fabric, every node of the spec's instance type."""
    from devtools.services.fleet_seed import seed_fleet
    from fleet.models import Node, NodeType

    seed_fleet(gpus=spec.nodes * 8, seed=spec.seed)
    node_type = NodeType.objects.filter(slug=spec.sku).first()
    if node_type is not None:
        Node.objects.exclude(node_type=node_type).update(node_type=node_type)


def _replay_factory(spec: TwinSpec):
    from devtools.twin_replay import ReplayDetector

    return ReplayDetector(
        seed=spec.seed, generation=spec.generation, gpus_per_node=spec.gpus_per_node, start=spec.start
    )
