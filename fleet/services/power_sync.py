"""The power sync loop (every 60 s, core.periodic): read every BMC's power state, out of band.

One pass, under the `bmc_power_sync` lease (core.locks.leased_run) and a time budget:
1. send the power actions still pending (asked by the health loop, or whose sender died);
2. read the power state of every BMC with credentials, least recently checked first, in
   batches, with at most BMC_SYNC_CONCURRENCY requests in flight (threads; they touch no
   database, the results are written per batch in bulk);
3. write what was seen: the node's observed `power_state` (an event when it changes),
   reachability and the BMC's error, accepted actions confirmed by the state they lead to,
   and drift — the BMC reporting other than the desired power with no action under way —
   recorded once as a node event when it starts. Drift is reported, never corrected here:
   a node found off may be off for a reason someone at the rack knows;
4. for nodes whose agent reports no fresh power, read the chassis power of reachable BMCs
   (bounded, least recently read first) as the node's wall reading, source `bmc`
   (fleet.services.bmc_wall_power);
5. fail accepted actions past their deadline (a cycle never seen back on), with the reason;
6. with the time left, refresh a few BMCs' firmware inventories (fleet.services.firmware_inventory).

Level-triggered: a pass reads the current state and writes only differences, so a missed or
repeated pass is harmless.

No transaction spans the pass: each batch's writes commit on their own, and the BMC reads
between them hold nothing. Under one pass-long transaction (a transaction-level advisory lock)
the node rows written for the first batch stayed locked until the last BMC answered, so those
nodes' heartbeats waited behind the network; on SQLite every write of every process did. In
`make demo` the first pass over 257 emulated BMCs took ~25 s, and every heartbeat in that
window was refused with a timeout.
"""

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.locks import leased_run
from fleet.choices import POWER_ACTION_RESULT, BMCErrorKind, PowerActionState, PowerState
from fleet.models import BMCPowerAction, Node, NodeBMC, NodeEvent

from . import bmc as redfish
from .bmc_credentials import CredentialsUnreadable, target_for
from .bmc_wall_power import read_chassis_power
from .firmware_inventory import refresh_firmware_inventories
from .power_actions import claim_pending, describe, observed_done, record_send_results, send_one, targets_for

ACTOR = "system:power_sync"
BATCH = 500
# The lease outlives the task's hard time limit (fleet.tasks.bmc_power_sync, 58 s): a pass
# killed at its limit cannot be still running when the next one takes over.
LEASE_TTL = timedelta(seconds=60)
# Errors that put a sentence on the node itself the first time they appear (not every pass).
NODE_VISIBLE_ERRORS = (BMCErrorKind.BAD_CREDENTIALS, BMCErrorKind.NOT_FOUND, BMCErrorKind.UNREACHABLE)


def run_power_sync(now: datetime | None = None) -> dict:
    with leased_run("bmc_power_sync", ttl=LEASE_TTL) as acquired:
        if not acquired:
            return {"skipped": True}
        return power_sync_pass(budget_s=settings.BMC_SYNC_BUDGET_S)


def _pool_map(fn, items: list, concurrency: int) -> list:
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(items)))) as pool:
        return list(pool.map(fn, items))


def send_pending(concurrency: int) -> int:
    claimed = claim_pending()
    targets, results = targets_for(claimed)
    sendable = [a for a in claimed if a.pk in targets]
    results += _pool_map(lambda a: send_one(a, targets[a.pk]), sendable, concurrency)
    record_send_results(results, actor=ACTOR)
    return len(results)


def _read(item) -> tuple:
    bmc, target = item
    if target is None:
        return bmc, None, redfish.BMCError(BMCErrorKind.BAD_CREDENTIALS, "no readable credentials stored")
    try:
        return bmc, redfish.read_power_state(target), None
    except redfish.BMCError as exc:
        return bmc, None, exc


def power_sync_pass(*, budget_s: float, concurrency: int | None = None) -> dict:
    started = time.monotonic()
    concurrency = concurrency or settings.BMC_SYNC_CONCURRENCY
    summary = {"sent": send_pending(concurrency), "read": 0, "unreachable": 0, "errors": 0, "changed": 0}
    summary.update(drift=0, confirmed=0, timed_out=0)
    pass_started = timezone.now()
    while time.monotonic() - started < budget_s:
        # Never checked first, then the least recently checked; every BMC read in this pass gets
        # last_checked_at >= pass_started, so it is not picked twice.
        base = NodeBMC.objects.exclude(username_encrypted="").select_related("node")
        batch = list(base.filter(last_checked_at__isnull=True)[:BATCH]) or list(
            base.filter(last_checked_at__lt=pass_started).order_by("last_checked_at")[:BATCH]
        )
        if not batch:
            break
        items = []
        for bmc in batch:
            try:
                items.append((bmc, target_for(bmc)))
            except CredentialsUnreadable:
                items.append((bmc, None))
        results = _pool_map(_read, items, concurrency)
        for key, value in _write_batch(results).items():
            summary[key] += value
    if time.monotonic() - started < budget_s:
        summary.update(read_chassis_power(now=timezone.now(), concurrency=concurrency, pool_map=_pool_map))
    summary["timed_out"] = fail_overdue()
    if time.monotonic() - started < budget_s:
        # Firmware at a low rate (a few dozen BMCs a pass, each every 6 h), with the time left.
        summary.update(refresh_firmware_inventories())
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary


@transaction.atomic
def _write_batch(results: list) -> dict:
    now = timezone.now()
    counts = {"read": 0, "unreachable": 0, "errors": 0, "changed": 0, "drift": 0, "confirmed": 0}
    node_ids = [bmc.node_id for bmc, _, _ in results]
    open_actions = {
        a.node_id: a for a in BMCPowerAction.objects.filter(node_id__in=node_ids, state=PowerActionState.ACCEPTED)
    }
    events: list[NodeEvent] = []
    bmcs, nodes_power, nodes_error = [], [], []
    for bmc, reading, error in results:
        node = bmc.node
        bmc.last_checked_at = now
        if error is not None:
            counts["unreachable" if error.kind == BMCErrorKind.UNREACHABLE else "errors"] += 1
            first_time = bmc.last_error_kind != error.kind
            bmc.reachable = error.kind != BMCErrorKind.UNREACHABLE
            bmc.last_error, bmc.last_error_kind, bmc.last_error_at = error.detail, error.kind, now
            bmcs.append(bmc)
            if first_time and error.kind in NODE_VISIBLE_ERRORS:
                node.last_error = f"BMC: {error.detail}"[:2000]
                nodes_error.append(node)
                events.append(_event(node, "bmc_error", error.detail, now))
            continue
        counts["read"] += 1
        bmc.reachable, bmc.last_ok_at, bmc.last_error, bmc.last_error_kind = True, now, "", ""
        observed = reading.power_state
        if observed != node.power_state:
            counts["changed"] += 1
            events.append(
                _event(node, "power_observed", f"the BMC reports {reading.redfish_state} (was {node.power_state})", now)
            )
            node.power_state = observed
            nodes_power.append(node)
        action = open_actions.get(node.pk)
        if action is not None and observed_done(action, observed):
            counts["confirmed"] += BMCPowerAction.objects.filter(pk=action.pk, state=PowerActionState.ACCEPTED).update(
                state=PowerActionState.SUCCEEDED,
                finished_at=now,
                detail=f"observed {observed} at {now:%H:%M:%S} UTC",
            )
            events.append(
                _event(node, f"power_{action.action}_done", f"{describe(action.action)} done: node is {observed}", now)
            )
            action = None
        drifting = bool(bmc.desired_power) and observed != PowerState.UNKNOWN and observed != bmc.desired_power
        if drifting and action is None and bmc.drift_since is None:
            bmc.drift_since = now
            counts["drift"] += 1
            events.append(
                _event(
                    node,
                    "power_drift",
                    f"desired {bmc.desired_power}, the BMC reports {reading.redfish_state}, and no power action is "
                    "under way. Power the node as wanted, or clear the desired state if someone switched it on "
                    "purpose.",
                    now,
                )
            )
        elif not drifting and bmc.drift_since is not None:
            bmc.drift_since = None
            events.append(
                _event(node, "power_drift_cleared", f"the BMC reports {reading.redfish_state} as desired", now)
            )
        bmcs.append(bmc)
    NodeBMC.objects.bulk_update(
        bmcs,
        ["last_checked_at", "reachable", "last_ok_at", "last_error", "last_error_kind", "last_error_at", "drift_since"],
        batch_size=1000,
    )
    Node.objects.bulk_update(nodes_power, ["power_state"], batch_size=1000)
    Node.objects.bulk_update(nodes_error, ["last_error"], batch_size=1000)
    NodeEvent.objects.bulk_create(events, batch_size=2000)
    return counts


def _event(node: Node, action: str, reason: str, at) -> NodeEvent:
    return NodeEvent(
        node=node, at=at, actor=ACTOR, action=action, from_state=node.lifecycle, to_state=node.lifecycle, reason=reason
    )


@transaction.atomic
def fail_overdue(now: datetime | None = None) -> int:
    """Accepted actions whose resulting state was not seen by their deadline fail, and say so
    on the node (the health loop sends a remediating node with a failed cycle to triage)."""
    now = now or timezone.now()
    overdue = list(
        BMCPowerAction.objects.filter(state__in=(PowerActionState.ACCEPTED, PowerActionState.PENDING), deadline__lt=now)
        .select_related("node")
        .select_for_update(skip_locked=True)
    )
    events = []
    for action in overdue:
        wanted = POWER_ACTION_RESULT[action.action]
        sent = f"accepted by the BMC at {action.sent_at:%H:%M:%S} UTC" if action.sent_at else "never sent"
        detail = (
            f"{describe(action.action)} {sent}, but the node was not seen {wanted} by the deadline "
            f"({action.deadline:%H:%M:%S} UTC; last seen {action.node.power_state}). Check the node at the rack "
            "(its power supplies, the BMC's own log)."
        )
        BMCPowerAction.objects.filter(pk=action.pk, state=action.state).update(
            state=PowerActionState.FAILED, finished_at=now, detail=detail
        )
        Node.objects.filter(pk=action.node_id).update(last_error=detail[:2000])
        events.append(_event(action.node, f"power_{action.action}_timed_out", detail, now))
    NodeEvent.objects.bulk_create(events)
    return len(overdue)
