"""`manage.py simulate_fleet [--url URL] [--speed X] [--workers N] [--part K/N]`: run a simulated
node agent for every node (or for one share of them), stepped concurrently, and print once a
minute how far behind schedule they are."""

import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from devtools.simulator import (
    AGENTS_PER_LANE,
    DEFAULT_MAX_LANES,
    MAX_WORKERS,
    FleetSimulator,
    count_simulated_nodes,
    lanes_for,
    parse_part,
)
from devtools.simulator_stats import lag_report

REFRESH_EVERY = timedelta(seconds=60)
REPORT_EVERY = 60.0


class Command(BaseCommand):
    help = (
        "Run one simulated node agent per node against the control plane at URL, through the real agent "
        "code and HTTP endpoints, with faults at the reference rates."
    )

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="control-plane URL")
        parser.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second")
        parser.add_argument("--seed", type=int, default=1, help="random seed (reproducible fleets)")
        parser.add_argument(
            "--scenario",
            action="append",
            default=[],
            metavar="HOST:SCRIPT",
            help='scripted faults for one node, e.g. "dc1-gpu00007:xid 79 on gpu 3 at 30s" (repeatable)',
        )
        parser.add_argument(
            "--missing-software",
            action="append",
            default=[],
            metavar="HOST:LAYER[,LAYER]",
            help='a node whose stack lacks these layers, e.g. "dc1-gpu00257:ib_stack" (repeatable)',
        )
        parser.add_argument("--duration", type=float, default=None, help="stop after this many wall seconds")
        parser.add_argument("--tick", type=float, default=1.0, help="wall seconds between ticks")
        parser.add_argument(
            "--workers",
            type=int,
            default=None,
            help=(
                f"concurrent HTTP lanes (threads), 1..{MAX_WORKERS}; "
                f"default one per {AGENTS_PER_LANE} nodes, at most {DEFAULT_MAX_LANES}"
            ),
        )
        parser.add_argument("--report-every", type=float, default=REPORT_EVERY, help="wall seconds between lag reports")
        parser.add_argument(
            "--part",
            default=None,
            metavar="K/N",
            help="simulate only share K of N of the nodes (by hostname), to drive one fleet from N processes",
        )

    def handle(
        self,
        *args,
        url,
        speed,
        seed,
        scenario,
        missing_software,
        duration,
        tick,
        workers,
        report_every,
        part,
        **options,
    ):
        if speed <= 0 or tick <= 0 or report_every <= 0:
            raise CommandError("--speed, --tick and --report-every must be positive.")
        share = _part(part)
        if workers is None:
            try:
                workers = lanes_for(count_simulated_nodes(share))
            except DatabaseError as exc:
                raise CommandError(f"Cannot read the node list ({exc}). Is the database up?") from exc
        if not 1 <= workers <= MAX_WORKERS:
            raise CommandError(f"--workers must be 1..{MAX_WORKERS}.")
        scenarios = {}
        for item in scenario:
            host, sep, script = item.partition(":")
            if not sep or not script.strip():
                raise CommandError(
                    f"--scenario {item!r}: write it as HOST:SCRIPT, e.g. 'dc1-gpu00007:xid 79 on gpu 3 at 30s'."
                )
            scenarios[host] = script
        missing = {}
        for item in missing_software:
            host, sep, layers = item.partition(":")
            if not sep or not layers.strip():
                raise CommandError(
                    f"--missing-software {item!r}: write it as HOST:LAYER[,LAYER], e.g. 'dc1-gpu00257:ib_stack'."
                )
            missing[host] = {layer.strip() for layer in layers.split(",") if layer.strip()}
        # The simulated nodes' energy counters outlive the simulator, as BMC and driver counters do.
        simulator = FleetSimulator(
            url=url.rstrip("/"),
            speed=speed,
            seed=seed,
            scenarios=scenarios,
            missing_software=missing,
            counter_dir=str(settings.VAR_DIR / "simulated-energy"),
            workers=workers,
            stagger=True,
            part=share,
        )
        started = time.monotonic()
        count = simulator.refresh(datetime.now(UTC))
        if not count:
            raise CommandError("No nodes to simulate. Seed a fleet first: manage.py seed_fleet --gpus 2048")
        self.stdout.write(
            f"Simulating {count} node agents{f' (share {part} of the fleet)' if share else ''} against {url} "
            f"at {speed}× on {workers} lanes (Ctrl-C to stop)."
        )
        last_refresh = datetime.now(UTC)
        last_report = time.monotonic()
        stop = threading.Event()
        lanes = simulator.run(stop, tick=tick)
        try:
            while duration is None or time.monotonic() - started < duration:
                # The lanes tick the agents on their own threads; this one refreshes the node
                # list, reports, and notices a lane that died.
                remaining = None if duration is None else duration - (time.monotonic() - started)
                stop.wait(min(tick, remaining) if remaining is not None else tick)
                for lane in lanes:
                    if lane.done():
                        lane.result()  # raises what killed it
                now = datetime.now(UTC)
                if now - last_refresh >= REFRESH_EVERY:
                    simulator.refresh(now)
                    last_refresh = now
                if time.monotonic() - last_report >= report_every:
                    self._report(simulator, simulator.take_longest_pass())
                    last_report = time.monotonic()
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            simulator.close()
        self.stdout.write("Simulator stopped.")

    def _report(self, simulator: FleetSimulator, longest_tick: float) -> None:
        summary = replace(simulator.lag(), tick_s=longest_tick)
        lines = lag_report(summary)
        for line in lines[:-1] if not summary.keeping_up else lines:
            self.stdout.write(line)
        if not summary.keeping_up:
            self.stderr.write(self.style.WARNING(lines[-1]))


def _part(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        return parse_part(text)
    except ValueError:
        raise CommandError(
            f"--part {text!r}: write it as K/N with 1 <= K <= N, e.g. 1/2 and 2/2 for two processes."
        ) from None
