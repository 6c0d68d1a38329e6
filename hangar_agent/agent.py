"""The node agent as a non-blocking state machine: `tick(now)` does whatever is due.

One tick: advance the hardware clock, heartbeat if due, poll desired-state if due,
start or poll the current action, queue health reports, meter the running
allocation, and flush the spool. Nothing in a tick sleeps (with a transport of
`max_attempts=1`), so the fleet simulator can drive thousands of agents from one
thread; `run_forever()` is the real node's loop around it.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests

from . import __version__
from .access import with_simulated_access
from .config import AgentConfig
from .executors import ActionRun, Executor, result, simulated_executors
from .hardware.base import HardwareBackend
from .hardware.simulated import SimulatedHardware
from .metering import METER_KIND, Meter, Usage, pick_grant, rfc3339
from .software import SimulatedStack, SimulatedUpgrade
from .spool import Flusher, Spool
from .transport import MAX_METER_BATCH, AgentAPI, AgentTransport, AuthError, TransportError

log = logging.getLogger(__name__)

ACTION_RESULT_KIND = "action_result"
HEALTH_REPORT_KIND = "health_report"
SOFTWARE_KIND = "software_inventory"
ACCESS_ACTIONS = frozenset({"provision", "sync_access"})
HEALTH_ACTIONS = frozenset({"dcgm_r1", "dcgm_r2", "dcgm_r3", "dcgm_r4", "burn_in"})
FINISHED_STATE = "finished_actions"
RUNNING_STATE = "running_action"
DESIRED_STATE = "desired_state"
GRANTS_STATE = "metering_grants"
REMEMBERED_ACTIONS = 1000
REMEMBERED_GRANTS = 16  # allocations a node may still have unsent usage of
MAX_XID_EVENTS = 32  # per GPU per heartbeat: the control plane refuses more


class Agent:
    """One node's agent. All collaborators are injected; see `simulated_agent` for the simulator."""

    def __init__(
        self,
        *,
        config: AgentConfig,
        transport: AgentAPI,
        hardware: HardwareBackend,
        executors: Mapping[str, Executor],
        spool: Spool,
        rng: random.Random | None = None,
        software: Callable[[], list[dict[str, Any]]] | None = None,
        stamp: Callable[[datetime], datetime] | None = None,
        handoff: Callable[[], dict[str, Any] | None] | None = None,
    ) -> None:
        """`software` reads the node's stack (hangar_agent.software); None sends no inventory.
        `stamp` maps the tick's clock to the time written into reports (observed_at,
        finished_at); a real node's tick clock is the wall clock, so by default it is itself.
        `handoff` reads the identity handoff the provisioning image received (default: the
        JSON file at `config.handoff_file`), or None when there is none."""
        self.config = config
        self.handoff = handoff or (lambda: read_handoff(config.handoff_file))
        self.identity_refused = False  # the control plane answered 401: this identity is over
        self.next_claim: datetime | None = None
        self.software = software
        self.stamp = stamp or _same
        self.transport = transport
        self.hardware = hardware
        self.executors = executors
        self.spool = spool
        rng = rng or random.Random()
        self.meter = Meter(spool, interval=config.meter_interval, grant_for=self._grant_for)
        backoff = {"rng": rng, "backoff_base": config.backoff_base, "backoff_cap": config.backoff_cap}
        self.flushers = [
            Flusher(spool, ACTION_RESULT_KIND, lambda b: transport.action_result(b[0]), **backoff),
            Flusher(spool, HEALTH_REPORT_KIND, lambda b: transport.health_report(b[0]), **backoff),
            Flusher(spool, SOFTWARE_KIND, lambda b: transport.software_inventory(b[0]), **backoff),
            Flusher(spool, METER_KIND, self._send_meter_events, batch_size=MAX_METER_BATCH, **backoff),
        ]
        self.desired: dict[str, Any] | None = spool.get_state(DESIRED_STATE)
        # Grants outlive the desired-state that listed them: the interval closed when an
        # allocation ends is sent after desired-state has already dropped it.
        self.grants: list[dict[str, Any]] = spool.get_state(GRANTS_STATE, [])
        self.finished: list[str] = spool.get_state(FINISHED_STATE, [])
        self.queue: list[dict[str, Any]] = []
        self.current: tuple[dict[str, Any], ActionRun] | None = None
        self.gpu_count = config.gpu_count
        self.unsent_xids: dict[int, dict[str, list]] = {}
        self.next_heartbeat: datetime | None = None
        self.next_desired: datetime | None = None
        self.next_health: datetime | None = None
        self.next_software: datetime | None = None
        self._recover_interrupted_action()

    # ---- the loop -------------------------------------------------------------------

    def tick(self, now: datetime) -> None:
        """Do what is due at `now` (timezone-aware). Never blocks on a retry."""
        self.hardware.advance(now, allocated=self.usage() is not None)
        if self.hardware.power_state() == "off":
            return
        if self.identity_refused and _due(self.next_claim, now):
            self.next_claim = now + timedelta(seconds=self.config.desired_state_interval)
            self._claim_identity()
        if _due(self.next_heartbeat, now):
            self.next_heartbeat = _next(self.next_heartbeat, now, self.config.heartbeat_interval)
            self._heartbeat(now)
        if _due(self.next_desired, now):
            self.next_desired = _next(self.next_desired, now, self.config.desired_state_interval)
            self._poll_desired()
        self._run_actions(now)
        if _due(self.next_health, now):
            self.next_health = _next(self.next_health, now, self.config.health_report_interval)
            # the periodic report also carries the drive inventory the exit gate relies on
            self._report_health(now, self.hardware.health_checks(), drives=self._drive_inventory())
        if self.software is not None and _due(self.next_software, now):
            self.next_software = _next(self.next_software, now, self.config.software_inventory_interval)
            self._report_software(now)
        self.meter.observe(now, self.usage())
        for flusher in self.flushers:
            flusher.flush(now)

    def run_forever(self, stop: threading.Event | None = None, period: float = 1.0) -> None:
        """Tick once a `period` until `stop` is set; a failing tick is logged, not fatal."""
        stop = stop or threading.Event()
        while not stop.is_set():
            began = time.monotonic()
            try:
                self.tick(datetime.now(UTC))
            except Exception:
                log.exception("tick failed; continuing")
            stop.wait(max(0.0, period - (time.monotonic() - began)))  # a slow tick does not stretch the period

    def usage(self) -> Usage | None:
        """What to meter now: only an active node running a known tenant's allocation."""
        d = self.desired or {}
        if d.get("lifecycle") != "active" or not d.get("allocation_id") or not d.get("tenant_id"):
            return None
        gpus = d.get("gpus") if isinstance(d.get("gpus"), int) else self.gpu_count
        sku = str(d.get("sku") or self.config.sku)
        for g in d.get("metering_grants") or []:  # what the grant allows is what is billed
            if isinstance(g, dict) and str(g.get("allocation_id")) == str(d["allocation_id"]):
                sku = str(g.get("sku") or sku)
                gpus = g["gpus"] if isinstance(g.get("gpus"), int) else gpus
        return Usage(allocation_id=str(d["allocation_id"]), tenant_id=str(d["tenant_id"]), sku=sku, gpus=gpus)

    def _send_meter_events(self, events: list[dict[str, Any]]) -> Any:
        """Send a batch; events the ledger refused are logged here (the ledger keeps them too)."""
        answer = self.transport.meter_events(events)
        rejected = answer.get("rejected") if isinstance(answer, dict) else None
        for item in rejected if isinstance(rejected, list) else []:
            if isinstance(item, dict):
                log.warning(
                    "meter event %s refused by the ledger (%s): %s",
                    item.get("event_id"),
                    item.get("code"),
                    item.get("detail"),
                )
        return answer

    def _grant_for(self, usage: Usage, start: datetime, end: datetime) -> str | None:
        """The control plane's grant for this usage, from the latest desired-state."""
        return pick_grant(self.grants, usage, start, end)

    def _remember_grants(self, listed: Any) -> None:
        """Keep the newest grant of each of the last few allocations (newest last)."""
        by_allocation = {str(g.get("allocation_id")): g for g in self.grants}
        for g in listed if isinstance(listed, list) else []:
            if isinstance(g, dict) and isinstance(g.get("grant"), str) and g.get("allocation_id"):
                by_allocation.pop(str(g["allocation_id"]), None)
                by_allocation[str(g["allocation_id"])] = g
        kept = list(by_allocation.values())[-REMEMBERED_GRANTS:]
        if kept != self.grants:
            self.grants = kept
            self.spool.set_state(GRANTS_STATE, kept)

    # ---- steps -------------------------------------------------------------------------

    def _heartbeat(self, now: datetime) -> None:
        gpus = self.hardware.gpus()
        self.gpu_count = max(self.gpu_count, len(gpus))
        for gpu in gpus:
            unsent = self.unsent_xids.pop(gpu["index"], None) or {}
            gpu["xid_errors"] = unsent.get("xid_errors", []) + gpu["xid_errors"]
            gpu["xid_events"] = (unsent.get("xid_events", []) + gpu.get("xid_events", []))[:MAX_XID_EVENTS]
        payload = {
            "observed_at": rfc3339(self.stamp(now)),
            "power_state": self.hardware.power_state(),
            "agent_version": __version__,
            "gpus": gpus,
        }
        driver = getattr(self.hardware, "driver", None)
        if driver is not None:
            payload.update(driver())  # driver_version, gpu_architecture: how the Xids are decoded
        ports = getattr(self.hardware, "ib_ports", None)
        if ports is not None:
            payload["ib_ports"] = ports()
        wall = self.hardware.wall_power() if hasattr(self.hardware, "wall_power") else None
        if wall:
            payload["wall_power"] = wall
        try:
            self.transport.heartbeat(payload)
        except TransportError as exc:
            self._note_refusal(exc)
            log.warning("heartbeat failed: %s", exc)
            for gpu in gpus:  # XIDs are events: carry them (with their detail) to the next heartbeat
                if gpu["xid_errors"] or gpu["xid_events"]:
                    self.unsent_xids[gpu["index"]] = {k: gpu[k] for k in ("xid_errors", "xid_events")}

    def _poll_desired(self) -> None:
        try:
            desired = self.transport.desired_state()
        except TransportError as exc:
            self._note_refusal(exc)
            log.warning("desired-state unavailable (%s); keeping the last known one", exc)
            return
        if not isinstance(desired, dict):
            log.warning("desired-state is not an object: %r", desired)
            return
        self._remember_grants(desired.get("metering_grants"))
        if desired != self.desired:
            self.desired = desired
            self.spool.set_state(DESIRED_STATE, desired)
        wanted = [a for a in desired.get("actions") or [] if isinstance(a, dict) and a.get("id")]
        wanted_ids = {str(a["id"]) for a in wanted}
        self.queue = [a for a in self.queue if str(a["id"]) in wanted_ids]
        known = set(self.finished) | {str(a["id"]) for a in self.queue}
        if self.current is not None:
            known.add(str(self.current[0]["id"]))
        self.queue += [a for a in wanted if str(a["id"]) not in known]

    def _run_actions(self, now: datetime) -> None:
        """One action at a time, in the order the control plane listed them."""
        while True:
            if self.current is None:
                if not self.queue:
                    return
                self.current = (self.queue[0], self._start(self.queue.pop(0), now))
            action, run = self.current
            outcome = run.poll(now)
            if outcome is None:
                return
            self._finish(action, outcome, now)
            self.current = None

    def _start(self, action: dict[str, Any], now: datetime) -> ActionRun:
        self.spool.set_state(RUNNING_STATE, action)
        name = str(action.get("action"))
        executor = self.executors.get(name)
        log.info("starting action %s (%s)", action["id"], name)
        if executor is None:
            return _Immediate(result("failed", f"this agent has no executor for {name!r}"))
        params = action.get("params") or {}
        if name in ACCESS_ACTIONS:
            params = self._current_access(params)
        try:
            return executor.start(params, now)
        except Exception as exc:
            log.exception("action %s (%s) could not start", action["id"], name)
            return _Immediate(result("failed", f"could not start: {exc}"))

    def _current_access(self, params: dict[str, Any]) -> dict[str, Any]:
        """The tenant's access as desired-state says it is now (a key deleted after the work item
        was queued is not delivered); the work item's own copy when desired-state has none for
        its allocation."""
        access = (self.desired or {}).get("access")
        if isinstance(access, dict) and str(access.get("allocation_id")) == str(params.get("allocation_id")):
            return {**params, "access": access}
        return params

    def _finish(self, action: dict[str, Any], outcome: dict[str, Any], now: datetime) -> None:
        action_id, name = str(action["id"]), str(action.get("action"))
        log.info("action %s (%s) %s: %s", action_id, name, outcome["status"], outcome["detail"])
        with self.spool.transaction():
            self.spool.append(
                ACTION_RESULT_KIND,
                {
                    "action_id": action_id,
                    "action": name,
                    "status": outcome["status"],
                    "detail": outcome["detail"],
                    "output": outcome.get("output") or {},
                    "finished_at": rfc3339(self.stamp(now)),
                },
                key=f"action:{action_id}",
            )
            self.finished = (self.finished + [action_id])[-REMEMBERED_ACTIONS:]
            self.spool.set_state(FINISHED_STATE, self.finished)
            self.spool.set_state(RUNNING_STATE, None)
            if name in ("upgrade", "wipe"):
                self.next_software = None  # report the new (or re-imaged) versions on this tick
            if name in HEALTH_ACTIONS:
                self._report_health(
                    now,
                    [
                        {
                            "name": name,
                            "status": "pass" if outcome["status"] == "succeeded" else "fail",
                            "detail": outcome["detail"],
                        }
                    ],
                )

    def _report_health(
        self, now: datetime, checks: list[dict[str, Any]], drives: list[dict[str, Any]] | None = None
    ) -> None:
        if checks or drives is not None:
            body: dict[str, Any] = {"observed_at": rfc3339(self.stamp(now)), "checks": checks}
            if drives is not None:
                body["drives"] = drives
            self.spool.append(HEALTH_REPORT_KIND, body)

    def _report_software(self, now: datetime) -> None:
        try:
            components = self.software()
        except Exception:  # an unreadable stack is not an empty one: send nothing this time
            log.exception("reading the software inventory failed")
            return
        if components:
            self.spool.append(SOFTWARE_KIND, {"observed_at": rfc3339(self.stamp(now)), "components": components})

    def _drive_inventory(self) -> list[dict[str, Any]] | None:
        """Every drive the machine shows, as the control plane's Drive rows need it (no device
        paths: they change across boots; serials do not)."""
        try:
            drives = self.hardware.drives()
        except Exception:  # an unreadable inventory is not an empty one: send none
            log.exception("reading the drive inventory failed")
            return None
        keys = ("serial", "model", "capacity_gb", "self_encrypting", "purge_supported")
        return [{k: d[k] for k in keys if d.get(k) is not None} for d in drives if d.get("serial")]

    # ---- identity per tenancy -----------------------------------------------------------

    def _note_refusal(self, exc: TransportError) -> None:
        if isinstance(exc, AuthError) and exc.status == 401:
            self.identity_refused = True

    def _claim_identity(self) -> bool:
        """The control plane stopped accepting this identity (a tenancy ended and the node's wipe
        began): claim the new one with the handoff the provisioning image received, if any."""
        try:
            handoff = self.handoff()
        except Exception:  # an unreadable handoff is no handoff
            log.exception("reading the identity handoff failed")
            return False
        if not handoff:
            log.warning("the control plane refuses this agent's token and no identity handoff is here yet")
            return False
        try:
            token = self.transport.claim_identity(str(handoff.get("node_id", "")), str(handoff.get("code", "")))
        except TransportError as exc:
            log.error("claiming the identity handoff failed: %s", exc)
            return False
        self.transport.set_token(token)
        self.identity_refused = False
        if self.config.token_file:
            _write_private(self.config.token_file, token)
        if self.config.handoff_file:
            try:
                Path(self.config.handoff_file).unlink()
            except OSError:
                pass  # served read-only by the provisioning channel: nothing to remove
        # speak at once as the new identity: its stack, its heartbeat, its work; and send what was
        # queued while no identity worked
        self.next_software = self.next_heartbeat = self.next_desired = None
        for flusher in self.flushers:
            flusher.failures, flusher.next_attempt = 0, None
        log.info("identity handoff claimed: this node speaks with its new token from now on")
        return True

    def _recover_interrupted_action(self) -> None:
        """An action running when the agent died is reported, never silently re-run."""
        action = self.spool.get_state(RUNNING_STATE)
        if not action:
            return
        now = datetime.now(UTC)
        if action.get("action") == "reboot":
            outcome = result("succeeded", "host rebooted and the agent is back")
        else:
            outcome = result("failed", "the agent restarted while this action ran; not re-run")
        self._finish(action, outcome, now)


def read_handoff(path: str) -> dict[str, Any] | None:
    """The handoff file's content, or None when there is none (yet)."""
    if not path:
        return None
    try:
        value = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    return value if isinstance(value, dict) else None


def _write_private(path: str, text: str) -> None:
    """Replace a file readable by its owner only, whole (never a half-written token)."""
    partial = f"{path}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(partial, path)


class _Reimaging:
    """The simulated wipe: the node is re-imaged to the versions the control plane names (its
    type's golden baseline), as the provisioning system's wipe image does on a real node."""

    def __init__(self, inner: Executor, stack: SimulatedStack) -> None:
        self.inner, self.stack = inner, stack

    def start(self, params: dict[str, Any], now: datetime) -> ActionRun:
        versions = params.get("versions")
        self.stack.reimage(versions if isinstance(versions, dict) else {})
        return self.inner.start(params, now)


class _Immediate:
    def __init__(self, outcome: dict[str, Any]) -> None:
        self.outcome = outcome

    def poll(self, now: datetime) -> dict[str, Any] | None:
        return self.outcome


def _same(moment: datetime) -> datetime:
    return moment


def _due(deadline: datetime | None, now: datetime) -> bool:
    return deadline is None or now >= deadline


def _next(deadline: datetime | None, now: datetime, interval: float) -> datetime:
    """The deadline after `deadline`, kept on its cadence: a call sent late (a slow tick, a busy
    host) does not push every later one late too, so heartbeats stay `interval` apart on
    average instead of `interval` plus the lateness. An agent more than a whole interval behind
    (suspended, or just started) starts a new cadence from `now` rather than sending a burst."""
    step = timedelta(seconds=interval)
    if deadline is not None and deadline + step > now:
        return deadline + step
    return now + step


def simulated_agent(
    *,
    url: str,
    token: str,
    hostname: str,
    session: requests.Session | Any,
    rng: random.Random,
    start: datetime,
    speed: float = 1.0,
    generation: str = "hopper",
    gpu_count: int = 8,
    sku: str = "",
    scenario: str | list[dict[str, Any]] | None = None,
    drives: list[dict[str, Any]] | None = None,
    spool_path: str = ":memory:",
    counter_file: str | None = None,
    missing_software: set[str] | None = None,
    stamp: Callable[[datetime], datetime] | None = None,
    handoff: Callable[[], dict[str, Any] | None] | None = None,
    **config: Any,
) -> Agent:
    """An agent on simulated hardware sharing `session` (one connection pool) with its fleet.
    `counter_file` keeps the simulated node's energy counters across agent restarts, as a real
    BMC and GPU driver keep theirs.

    The transport makes single attempts (no sleeping in tick); retries happen on
    later ticks through the spool's backoff. `rng` seeds everything, so a fleet
    built from one seeded Random is reproducible.
    """
    cfg = AgentConfig(
        url=url,
        token=token,
        backend="simulated",
        spool_path=spool_path,
        generation=generation,
        gpu_count=gpu_count,
        sku=sku,
        speed=speed,
        max_attempts=1,
        **config,
    ).validated()
    hardware = SimulatedHardware(
        rng=random.Random(rng.getrandbits(64)),
        start=start,
        generation=generation,
        gpu_count=gpu_count,
        speed=speed,
        hostname=hostname,
        scenario=scenario,
        drives=drives,
        counter_file=counter_file,
    )
    transport = AgentTransport(
        url, token, session=session, max_attempts=1, timeout=(cfg.connect_timeout, cfg.read_timeout)
    )
    executors = simulated_executors(hardware, random.Random(rng.getrandbits(64)))
    agent_rng = random.Random(rng.getrandbits(64))
    # drawn after everything else, so a seeded fleet's hardware and faults stay what they were
    stack = SimulatedStack(random.Random(rng.getrandbits(64)), generation, missing=missing_software)
    executors["upgrade"] = SimulatedUpgrade(stack, random.Random(rng.getrandbits(64)), hardware.wall)
    executors["wipe"] = _Reimaging(executors["wipe"], stack)
    # seeded from the hostname, not drawn from `rng`: the fleet's shared generator (and so every
    # later agent's timing) stays what it was before access delivery existed
    executors = with_simulated_access(executors, hardware, stack, random.Random(f"{hostname}:access"))
    return Agent(
        config=cfg,
        transport=transport,
        hardware=hardware,
        executors=executors,
        spool=Spool(spool_path),
        rng=agent_rng,
        software=stack.components,
        stamp=stamp,
        handoff=handoff,
    )
