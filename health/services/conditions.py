"""Conditions: upsert the latest state per (node, gpu, signal) in batches, with history.

Callers hand in what they observed for many nodes at once; this costs one SELECT of the
existing rows plus at most one bulk INSERT, one bulk UPDATE and one INSERT of history,
whatever the number of nodes or GPUs.
"""

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from core.bulk import update_rows
from health.choices import SEVERITY_RANK, ConditionEventKind, ConditionStatus
from health.models import Condition, ConditionEvent
from health.policy import is_event, severity_for

Key = tuple[int | None, str]  # (gpu_index or None for the node, signal)


@transaction.atomic
def apply_observations(
    *, observed: dict, now: datetime, clear_absent: dict | None = None, load_signals: Iterable[str] | None = None
) -> int:
    """Record `observed` ({node_id: {(gpu, signal): detail}}) and clear, per node, the active
    conditions whose signal is in `clear_absent[node_id]` but was not observed.

    A detail may be a (detail, severity) pair: the severity decided from the observation's own
    fields (an Xid decoded by health.xid), else the policy's rule for the signal.

    Returns the number of conditions raised (new or re-activated). `load_signals` narrows the
    SELECT of existing rows when the caller only touches a few signals (the sweep).
    """
    clear_absent = clear_absent or {}
    node_ids = set(observed) | {n for n, sigs in clear_absent.items() if sigs}
    if not node_ids:
        return 0
    existing_qs = Condition.objects.filter(node_id__in=node_ids).order_by()
    if load_signals is not None:
        existing_qs = existing_qs.filter(signal__in=list(load_signals))
    existing: dict[tuple, Condition] = {(c.node_id, c.gpu_index, c.signal): c for c in existing_qs}
    new_rows: list[Condition] = []
    changed: list[Condition] = []
    history: list[ConditionEvent] = []
    for node_id, signals in observed.items():
        for (gpu, signal), detail in signals.items():
            if isinstance(detail, tuple):
                detail, severity = detail
            else:
                severity = severity_for(signal)
            row = existing.get((node_id, gpu, signal))
            if row is None:
                new_rows.append(
                    Condition(
                        node_id=node_id,
                        gpu_index=gpu,
                        signal=signal,
                        severity=severity,
                        first_seen=now,
                        last_seen=now,
                        detail=detail[:300],
                    )
                )
            elif row.status == ConditionStatus.CLEARED:
                row.status, row.first_seen, row.last_seen, row.count = ConditionStatus.ACTIVE, now, now, 1
                row.severity, row.detail = severity, detail[:300]
                changed.append(row)
            else:
                row.last_seen = now
                if is_event(signal):
                    row.count += 1  # each heartbeat reports XIDs seen since the last one
                row.detail = detail[:300]
                if SEVERITY_RANK[severity] > SEVERITY_RANK[row.severity]:
                    row.severity = severity  # a later, graver decode of the same Xid is never lost
                changed.append(row)
                continue
            history.append(
                ConditionEvent(
                    node_id=node_id,
                    gpu_index=gpu,
                    signal=signal,
                    severity=severity,
                    kind=ConditionEventKind.RAISED,
                    at=now,
                    detail=detail[:300],
                )
            )
    for (node_id, gpu, signal), row in existing.items():
        if (
            row.status == ConditionStatus.ACTIVE
            and signal in clear_absent.get(node_id, ())
            and (gpu, signal) not in observed.get(node_id, {})
        ):
            row.status = ConditionStatus.CLEARED
            row.last_seen = now
            changed.append(row)
            history.append(
                ConditionEvent(
                    node_id=node_id,
                    gpu_index=gpu,
                    signal=signal,
                    severity=row.severity,
                    kind=ConditionEventKind.CLEARED,
                    at=now,
                )
            )
    if new_rows:
        Condition.objects.bulk_create(new_rows, batch_size=2000)
    if changed:
        # One UPDATE … FROM (VALUES …) per batch: Django's CASE WHEN bulk_update took minutes when a
        # sweep escalated 125,000 nodes' throttling at once (benchmarks/bench_health.py).
        update_rows(
            Condition, changed, ["status", "severity", "first_seen", "last_seen", "count", "detail"], using="default"
        )
    if history:
        ConditionEvent.objects.bulk_create(history, batch_size=2000)
    return sum(1 for e in history if e.kind == ConditionEventKind.RAISED)


@transaction.atomic
def clear_node_conditions(*, node_ids: list, now: datetime) -> int:
    """A node passed the gate: everything it was pulled for is resolved. Level signals come
    back with the next heartbeat if they are still true."""
    rows = list(
        Condition.objects.filter(node_id__in=node_ids, status=ConditionStatus.ACTIVE).values_list(
            "node_id", "gpu_index", "signal", "severity"
        )
    )
    Condition.objects.filter(node_id__in=node_ids, status=ConditionStatus.ACTIVE).update(
        status=ConditionStatus.CLEARED, last_seen=now
    )
    ConditionEvent.objects.bulk_create(
        [
            ConditionEvent(
                node_id=n,
                gpu_index=g,
                signal=s,
                severity=sev,
                kind=ConditionEventKind.CLEARED,
                at=now,
                detail="cleared: node passed validation",
            )
            for n, g, s, sev in rows
        ],
        batch_size=2000,
    )
    return len(rows)
