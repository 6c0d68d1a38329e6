"""The simulator steps its agents side by side, measures how late they are, says when the
server cannot keep up, and never stamps a report ahead of the server's clock."""

import threading
import time
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from devtools.services.fleet_seed import seed_fleet
from devtools.simulator import FleetSimulator, count_simulated_nodes, in_part, lanes_for, parse_part
from devtools.simulator_stats import CallFigures, CallStats, LagSummary, lag_report, server_time_s
from fleet.models import Node
from health.models import HealthCheckResult


def _summary(**overrides) -> LagSummary:
    fields = {
        "window_s": 60.0,
        "agents": 2048,
        "lanes": 16,
        "interval_s": 10.0,
        "calls": {"heartbeat": CallFigures(count=12288, p50_ms=8, p99_ms=40, errors=0, refused=0, busy_s=120)},
        "age_p50_s": 10.0,
        "age_p99_s": 10.9,
        "silent": 0,
        "tick_s": 0.4,
    }
    return LagSummary(**{**fields, **overrides})


def test_on_schedule_the_report_is_figures_only():
    lines = lag_report(_summary())
    assert "heartbeat age p50 10.0 s, p99 10.9 s (interval 10 s)" in lines[0]
    assert "heartbeat" in lines[1] and "(205/s)" in lines[1] and "p99 40 ms" in lines[1]
    assert not any("NOT KEEPING UP" in line for line in lines)


def test_late_heartbeats_with_busy_lanes_blame_the_server():
    busy = CallFigures(count=6000, p50_ms=150, p99_ms=900, errors=3, refused=0, busy_s=900)
    lines = lag_report(_summary(calls={"heartbeat": busy}, age_p99_s=24.0))
    assert lines[-1].startswith("NOT KEEPING UP: the server cannot answer 2048 agents")
    assert "web workers" in lines[-1] and "94%" in lines[-1]  # no Server-Timing: the lanes' wait decides


def _queued(**overrides) -> LagSummary:
    """Late heartbeats, busy lanes, and answers that took 600 ms of which the handler spent 4."""
    queued = CallFigures(count=6000, p50_ms=600, p99_ms=1000, errors=0, refused=0, busy_s=900, server_p50_ms=4.0)
    return _summary(calls={"heartbeat": queued}, age_p99_s=17.0, **overrides)


def test_quick_handlers_on_a_loaded_machine_blame_the_shared_cores_not_the_server():
    lines = lag_report(_queued(process_cores=0.55, machine_busy=0.93))
    assert lines[-1].startswith("NOT KEEPING UP: this machine is short of CPU")
    assert "handlers took 1% of a call's p50" in lines[-1] and "93% busy" in lines[-1]
    assert "another machine" in lines[-1]
    assert "p50 600 ms (server 4.0 ms)" in lines[1]
    assert "this process 0.55 cores, machine CPU 93% busy" in lines[0]


def test_a_busy_machine_is_named_even_when_the_lanes_look_idle():
    lines = lag_report(_summary(silent=12, tick_s=14.0, process_cores=0.3, machine_busy=0.91))
    assert lines[-1].startswith("NOT KEEPING UP: this machine is short of CPU")
    assert "91% busy, 0.30 cores of it this process" in lines[-1]


def test_quick_handlers_on_an_idle_machine_mean_every_worker_is_busy():
    lines = lag_report(_queued(process_cores=0.3, machine_busy=0.4))
    assert lines[-1].startswith("NOT KEEPING UP: every web worker is busy")
    assert "Run more web workers" in lines[-1]


def test_slow_handlers_still_blame_the_server():
    slow = CallFigures(count=6000, p50_ms=600, p99_ms=1000, errors=0, refused=0, busy_s=900, server_p50_ms=550.0)
    lines = lag_report(_summary(calls={"heartbeat": slow}, age_p99_s=17.0, process_cores=0.3, machine_busy=0.97))
    assert lines[-1].startswith("NOT KEEPING UP: the server cannot answer 2048 agents")
    assert "handlers took 92% of each call's p50" in lines[-1]


def test_server_timing_header_gives_the_applications_own_time():
    assert server_time_s("app;dur=4.2") == pytest.approx(0.0042)
    assert server_time_s("db;dur=1, app;desc=x;dur=12") == pytest.approx(0.012)
    assert server_time_s(None) is None and server_time_s("app") is None and server_time_s("app;dur=x") is None


def test_silent_agents_with_idle_lanes_blame_the_simulator():
    lines = lag_report(_summary(silent=12, tick_s=14.0, process_cores=0.97, machine_busy=0.6))
    assert lines[-1].startswith("NOT KEEPING UP: the simulator itself is behind")
    assert "14.0 s" in lines[-1] and "0.97 cores" in lines[-1] and "--part" in lines[-1]


def test_heartbeat_age_is_the_gap_between_accepted_heartbeats_of_one_agent():
    stats = CallStats()
    stats.record("heartbeat", "a", 0.01, 202)
    stats.record("heartbeat", "b", 0.01, 202)
    stats.record("heartbeat", "a", 0.01, 202)
    stats.record("heartbeat", "b", 0.01, 503)  # failed: no renewal, counted as an error
    stats.record("desired-state", "a", 0.02, 304, 0.003)
    summary = stats.take(agents=3, lanes=2, interval=10.0)
    assert summary.calls["heartbeat"].count == 4 and summary.calls["heartbeat"].errors == 1
    assert summary.calls["heartbeat"].server_p50_ms is None  # no Server-Timing came back
    assert summary.calls["desired-state"].server_p50_ms == pytest.approx(3.0)
    assert summary.process_cores is not None and summary.process_cores >= 0
    assert summary.machine_busy is None or 0 <= summary.machine_busy <= 1
    assert summary.calls["desired-state"].errors == 0
    assert summary.age_p99_s is not None and summary.age_p99_s < 1  # one gap, a's
    assert summary.silent == 1  # the third agent never got a heartbeat through
    assert stats.take(agents=3, lanes=2, interval=10.0).calls == {}  # counters start again


@pytest.mark.django_db(transaction=True)
def test_lanes_run_side_by_side(live_server, monkeypatch):
    from devtools.services.fleet_seed import seed_fleet
    from hangar_agent.agent import Agent

    seed_fleet(gpus=32)
    simulator = FleetSimulator(url=live_server.url, seed=3, workers=4)
    assert simulator.refresh(datetime.now(UTC)) == 4
    together = threading.Barrier(4, timeout=10)  # breaks (and the tick logs an error) unless all 4 meet
    met = []

    def tick(self, now):
        together.wait()
        met.append(threading.current_thread().name)

    monkeypatch.setattr(Agent, "tick", tick)
    simulator.step(datetime.now(UTC))
    simulator.close()
    assert len(met) == 4 and len(set(met)) == 4


@pytest.mark.django_db(transaction=True)
def test_a_fast_simulation_stamps_reports_with_the_server_clock(live_server):
    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=16)
    simulator = FleetSimulator(url=live_server.url, speed=120.0, seed=9, workers=2)
    start = datetime.now(UTC)
    simulator.refresh(start)
    now = start
    for _ in range(160):  # 800 simulated seconds in a few wall seconds: far past the 300 s skew limit
        simulator.step(now)
        now += timedelta(seconds=5)
    simulator.close()
    reports = HealthCheckResult.objects.all()
    assert reports.filter(observed_at__gt=start + timedelta(seconds=300)).count() == 0
    assert reports.filter(refused="clock_skew").count() == 0
    assert reports.count() >= 2 * 4  # each node's periodic reports (t=0 and t=300 s) got through
    skews = list(Node.objects.values_list("agent_clock_skew_s", flat=True))
    assert all(s is not None and abs(s) <= 5 for s in skews), skews


@pytest.mark.django_db(transaction=True)
def test_the_command_prints_the_lag_of_every_kind_of_call(live_server):
    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=16)
    out = StringIO()
    call_command(
        "simulate_fleet",
        url=live_server.url,
        duration=2.5,
        tick=0.5,
        workers=2,
        report_every=1.0,
        stdout=out,
        stderr=StringIO(),
    )
    text = out.getvalue()
    assert "on 2 lanes" in text and "heartbeat age p50" in text
    assert "desired-state" in text and "heartbeat " in text
    assert " ms (server " in text  # the server's own time, read from its Server-Timing header


@pytest.mark.django_db
def test_a_staggered_fleet_spreads_its_first_calls_over_their_intervals():
    """Agents booted together send their first heartbeat within one interval and their heavy
    first health and software reports within the first minute, not all in one tick."""
    seed_fleet(gpus=128)
    start = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)
    simulator = FleetSimulator(url="http://127.0.0.1:9", seed=4, stagger=True)
    assert simulator.refresh(start) == 16
    agents = list(simulator.agents.values())
    beats = [(a.next_heartbeat - start).total_seconds() for a in agents]
    reports = [(a.next_health - start).total_seconds() for a in agents]
    assert all(0 <= b <= 10 for b in beats) and all(0 <= r <= 60 for r in reports)
    assert len({round(b, 3) for b in beats}) == len(agents)  # not one tick for all
    assert max(reports) - min(reports) > 20
    locked = FleetSimulator(url="http://127.0.0.1:9", seed=4)
    locked.refresh(start)
    assert {a.next_heartbeat for a in locked.agents.values()} == {None}  # tests step agents in lockstep


@pytest.mark.django_db
def test_a_refresh_reads_whole_rows_only_for_nodes_that_arrived():
    """Every minute the simulator rereads the node list. Reading each node with its type and
    drives held the interpreter lock ~2 s at 2,048 nodes and stalled every lane; a pass with
    no new node is one narrow query, and one that finds new nodes reads just those."""
    seed_fleet(gpus=64)
    start = datetime(2026, 12, 4, 20, 0, tzinfo=UTC)
    simulator = FleetSimulator(url="http://127.0.0.1:9", seed=4)
    assert simulator.refresh(start) == 8
    with CaptureQueriesContext(connection) as quiet:
        assert simulator.refresh(start) == 8
    assert len(quiet) == 1 and "drive" not in quiet[0]["sql"].lower()
    gone = Node.objects.order_by("hostname").first()
    gone.hostname = "arrived-01"
    gone.save(update_fields=["hostname"])
    with CaptureQueriesContext(connection) as changed:
        assert simulator.refresh(start) == 8
    assert len(changed) == 3  # the list, the new node with its type, its drives
    assert "arrived-01" in simulator.agents
    serials = {d["serial"] for d in simulator.agents["arrived-01"].hardware.drive_inventory}
    assert serials == set(gone.drives.values_list("serial", flat=True)) != set()


@pytest.mark.django_db(transaction=True)
def test_free_running_lanes_do_not_wait_for_the_slowest(live_server, monkeypatch):
    """Under `run`, an agent whose every tick takes 0.6 s holds up its own lane only: the other
    lanes keep ticking their agents once a `tick`. (Stepped with a barrier, every lane would
    tick only as often as the slow one.)"""
    from hangar_agent.agent import Agent

    seed_fleet(gpus=32)
    simulator = FleetSimulator(url=live_server.url, seed=3, workers=4)
    assert simulator.refresh(datetime.now(UTC)) == 4
    slow = simulator.lanes[0][0][1]
    ticks: dict[int, int] = {}

    def tick(self, now):
        ticks[id(self)] = ticks.get(id(self), 0) + 1
        if self is slow:
            time.sleep(0.6)

    monkeypatch.setattr(Agent, "tick", tick)
    stop = threading.Event()
    lanes = simulator.run(stop, tick=0.05)
    time.sleep(1.5)
    stop.set()
    for lane in lanes:
        lane.result(timeout=5)
    simulator.close()
    others = [count for agent, count in ticks.items() if agent != id(slow)]
    assert ticks[id(slow)] <= 3
    assert len(others) == 3 and min(others) >= 10, ticks
    assert simulator.take_longest_pass() >= 0.6


def test_lanes_default_to_one_per_four_agents_up_to_64():
    assert (lanes_for(0), lanes_for(1), lanes_for(4), lanes_for(5)) == (1, 1, 1, 2)
    assert lanes_for(252) == 63 and lanes_for(257) == 64 and lanes_for(2048) == 64 and lanes_for(125_000) == 64


@pytest.mark.django_db(transaction=True)
def test_the_command_deals_the_fleet_into_lanes_by_its_size(live_server):
    seed_fleet(gpus=64)
    out = StringIO()
    call_command("simulate_fleet", url=live_server.url, duration=0.5, tick=0.25, stdout=out, stderr=StringIO())
    assert "Simulating 8 node agents" in out.getvalue() and "on 2 lanes" in out.getvalue()


@pytest.mark.django_db
def test_shares_of_the_fleet_cover_every_node_once():
    """`--part K/N` lets N simulator processes (each about one core) drive one fleet between them."""
    seed_fleet(gpus=256)
    start = datetime(2026, 12, 4, 2, 0, tzinfo=UTC)
    shares = [FleetSimulator(url="http://127.0.0.1:9", part=(k, 3)) for k in (1, 2, 3)]
    counts = [s.refresh(start) for s in shares]
    hostnames = [set(s.agents) for s in shares]
    assert sum(counts) == Node.objects.count() == 32 and all(counts)
    assert not (hostnames[0] & hostnames[1]) and not (hostnames[1] & hostnames[2]) and not (hostnames[0] & hostnames[2])
    assert all(in_part(h, (2, 3)) for h in hostnames[1])
    assert [count_simulated_nodes((k, 3)) for k in (1, 2, 3)] == counts  # what sizes the default lanes
    assert parse_part("2/3") == (2, 3)
    for bad in ("3/2", "0/2", "half", "1-2", "1/"):
        with pytest.raises(ValueError):
            parse_part(bad)
    with pytest.raises(ValueError):
        FleetSimulator(url="http://127.0.0.1:9", part=(4, 3))


@pytest.mark.django_db(transaction=True)
def test_the_command_runs_one_share_and_refuses_a_share_it_cannot_read(live_server):
    seed_fleet(gpus=64)
    out = StringIO()
    call_command(
        "simulate_fleet", url=live_server.url, duration=0.5, tick=0.25, part="2/2", stdout=out, stderr=StringIO()
    )
    mine = sum(1 for h in Node.objects.values_list("hostname", flat=True) if in_part(h, (2, 2)))
    assert f"Simulating {mine} node agents (share 2/2 of the fleet)" in out.getvalue()
    for bad in ("3/2", "0/2", "half", "1-2"):
        with pytest.raises(CommandError, match="K/N"):
            call_command("simulate_fleet", url=live_server.url, duration=0.1, part=bad, stdout=StringIO())
