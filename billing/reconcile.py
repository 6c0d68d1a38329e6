"""Reconciliation: ledger usage against allocation history, both ways (read-only).

For a period, every (allocation, node) membership that overlapped it for at least
`min_overlap` (default 10 minutes, a few meter intervals) must have metering in the
ledger, and every metered (allocation, node) pair must match a membership of that
allocation and tenant overlapping the period. Anything else is a gap: a node running a
tenant's workload unbilled, or billing with no allocation behind it.
"""

from dataclasses import dataclass, field
from datetime import date, timedelta
from uuid import UUID

from django.db.models import Max, Min, Q, Sum
from django.utils import timezone

from billing.models import UsageEvent
from billing.periods import format_period, period_end, period_start
from billing.selectors import archived_periods
from core.errors import Conflict
from core.expressions import EpochMicros, epoch_micros, from_epoch_micros
from tenants.models import AllocationNode

LEDGER = "ledger"


class PeriodArchived(Conflict):
    """The month's usage rows were archived out of the ledger: every membership would read as
    unmetered, so the comparison is refused rather than reported as gaps."""

    code = "period_archived"


@dataclass(frozen=True)
class Gap:
    allocation_id: UUID
    node_id: UUID
    tenant_id: UUID
    detail: str


@dataclass
class ReconcileReport:
    period: date
    memberships: int = 0
    metered_pairs: int = 0
    unmetered: list[Gap] = field(default_factory=list)
    unallocated: list[Gap] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unmetered and not self.unallocated


def reconcile(*, period: date, min_overlap: timedelta = timedelta(minutes=10)) -> ReconcileReport:
    if period in archived_periods():
        raise PeriodArchived(
            f"{format_period(period)} is archived: its usage rows left the ledger, so it cannot be compared "
            "with allocation history. Restore it first (manage.py archive_ledger_month "
            f"{format_period(period)} --restore)."
        )

    start, end = period_start(period), period_end(period)
    now = timezone.now()
    memberships = (
        AllocationNode.objects.filter(started_at__lt=end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .values_list("allocation_id", "node_id", "allocation__tenant_id", "started_at", "ended_at")
    )
    allocated = {}
    for allocation_id, node_id, tenant_id, started, ended in memberships:
        overlap = min(ended or now, end, now) - max(started, start)
        key = (allocation_id, node_id)
        allocated[key] = (tenant_id, max(overlap, allocated.get(key, (None, timedelta(0)))[1]))
    metered = {
        (row["allocation_id"], row["node_id"]): (row["tenant_id"], row["micro"])
        for row in UsageEvent.objects.using(LEDGER)
        .filter(period=period)
        .values("allocation_id", "node_id", "tenant_id")
        .annotate(micro=Sum("quantity_micro"))
    }
    report = ReconcileReport(period=period, memberships=len(allocated), metered_pairs=len(metered))
    for (allocation_id, node_id), (tenant_id, overlap) in sorted(allocated.items(), key=str):
        if overlap >= min_overlap and (allocation_id, node_id) not in metered:
            report.unmetered.append(
                Gap(allocation_id, node_id, tenant_id, f"allocated for {overlap} in the period, no meter events")
            )
    for (allocation_id, node_id), (tenant_id, micro) in sorted(metered.items(), key=str):
        owner = allocated.get((allocation_id, node_id))
        if owner is None:
            report.unallocated.append(
                Gap(
                    allocation_id,
                    node_id,
                    tenant_id,
                    f"{micro / 3.6e9:.2f} GPU-h metered, no allocation membership in the period",
                )
            )
        elif owner[0] != tenant_id:
            report.unallocated.append(
                Gap(
                    allocation_id,
                    node_id,
                    tenant_id,
                    f"metered to tenant {tenant_id}, allocation belongs to {owner[0]}",
                )
            )
    return report


@dataclass(frozen=True)
class Contradiction:
    usage_event_id: int
    tenant_id: UUID
    period: date
    reason: str


def _windows(memberships: list[tuple], now, tolerance: timedelta) -> list[tuple]:
    return [(started - tolerance, (ended or now) + tolerance) for started, ended in memberships]


def _pair_rows(rows, allocation_id, node_id, tenant_id):
    # Built only for a span that needs its rows read: building a queryset per span cost a
    # 10,000-tenant run seconds even when every span lay inside its membership.
    return rows.filter(allocation_id=allocation_id, node_id=node_id, tenant_id=tenant_id)


def usage_spans(rows) -> dict:
    """(allocation_id, node_id, tenant_id) → [first start, last end] of these usage rows, in
    microseconds since 1970 (a billing run reads wider ones the database keeps instead:
    billing.services.rating.run_spans)."""
    return {
        (allocation, node, tenant): [first, last]
        for allocation, node, tenant, first, last in rows.values_list("allocation_id", "node_id", "tenant_id")
        .annotate(first=EpochMicros(Min("start")), last=EpochMicros(Max("end")))
        .order_by()
    }


_MEMBERSHIP_FIELDS = ("allocation_id", "node_id", "allocation__tenant_id")
_MEMBERSHIP_EDGES = {"started": EpochMicros("started_at"), "ended": EpochMicros("ended_at")}


def _read_memberships(memberships, owners: dict, windows: dict) -> None:
    """Fill owners (allocation → tenant) and windows ((allocation, node) → [(started, ended or
    None)], microseconds since 1970) from an AllocationNode queryset."""
    for allocation_id, node_id, tenant_id, started, ended in memberships.annotate(**_MEMBERSHIP_EDGES).values_list(
        *_MEMBERSHIP_FIELDS, "started", "ended"
    ):
        owners[allocation_id] = tenant_id
        windows.setdefault((allocation_id, node_id), []).append((started, ended))


def contradicted_usage(*, scope: Q, tolerance: timedelta, now=None, spans: dict | None = None) -> list[Contradiction]:
    """Usage rows in `scope` (not yet disputed) that the allocation history contradicts: the node
    was never in that allocation, the allocation belongs to another tenant, or the row lies
    outside every membership of the node in it (beyond `tolerance`).

    Every row passed its grant's signature check; this is the second, control-plane opinion.
    `spans`: the rows' `usage_spans`, or spans at least as wide covering at least their pairs
    (a billing run's `run_spans`); read here when not given. A span only decides whether a
    pair's rows are read; a wider one at worst has them read and checked one by one, so the
    result is the same. Spans and memberships are compared as integers (microseconds):
    reading 20,000 timestamps cost a 10,000-tenant run a tenth of a second. Rows are read one by
    one only for (allocation, node) pairs whose span is not inside a membership.
    """
    now = now or timezone.now()
    rows = UsageEvent.objects.using(LEDGER).filter(scope, dispute__isnull=True)
    if spans is None:
        spans = usage_spans(rows)
    if not spans:
        return []
    tolerance_us = tolerance // timedelta(microseconds=1)
    now_us = epoch_micros(now)
    # The memberships by time first: every one whose window (± tolerance) reaches the spans'
    # overall range. That is all a span inside a membership needs (a window outside the range
    # cannot contain any of its rows), and unlike one query per 1,000 allocation ids it costs a
    # 10,000-tenant run one statement. A span whose allocation, or whose (allocation, node) pair,
    # it did not find has that allocation's whole history read, so "never in this allocation"
    # is told apart from "outside its memberships" exactly as before.
    lo = min(first for first, _ in spans.values()) - tolerance_us
    hi = max(last for _, last in spans.values()) + tolerance_us
    owners: dict = {}
    windows: dict = {}
    _read_memberships(
        AllocationNode.objects.filter(started_at__lte=from_epoch_micros(hi)).filter(
            Q(ended_at__isnull=True) | Q(ended_at__gte=from_epoch_micros(lo))
        ),
        owners,
        windows,
    )
    unresolved = []
    out: list[Contradiction] = []
    for key, span in spans.items():
        allocation_id, node_id, tenant_id = key
        owner = owners.get(allocation_id)
        found = windows.get((allocation_id, node_id))
        if owner is None or found is None:
            unresolved.append((key, span))
        elif owner == tenant_id and _inside(span, found, tolerance_us, now_us):
            continue
        else:
            out.extend(_contradictions(rows, key, owner, found is not None, now, tolerance))
    if unresolved:
        allocations = sorted({key[0] for key, _ in unresolved}, key=str)
        owners, windows = {}, {}
        for start in range(0, len(allocations), 1000):
            _read_memberships(
                AllocationNode.objects.filter(allocation_id__in=allocations[start : start + 1000]), owners, windows
            )
        for key, span in unresolved:
            allocation_id, node_id, tenant_id = key
            owner, found = owners.get(allocation_id), windows.get((allocation_id, node_id))
            if (
                owner is not None
                and owner == tenant_id
                and found is not None
                and _inside(span, found, tolerance_us, now_us)
            ):
                continue
            out.extend(_contradictions(rows, key, owner, found is not None, now, tolerance))
    return out


def _inside(span, windows: list, tolerance_us: int, now_us: int) -> bool:
    first, last = span
    return any(
        started - tolerance_us <= first and last <= (now_us if ended is None else ended) + tolerance_us
        for started, ended in windows
    )


def _contradictions(rows, key: tuple, owner, is_member: bool, now, tolerance: timedelta) -> list[Contradiction]:
    """The rows of one (allocation, node, tenant) span that the history contradicts, with why."""
    allocation_id, node_id, tenant_id = key
    pair_rows = _pair_rows(rows, allocation_id, node_id, tenant_id)
    if owner is not None and owner != tenant_id:
        reason = f"metered to tenant {tenant_id}, but the allocation belongs to tenant {owner}"
    elif not is_member:
        reason = f"node {node_id} was never in allocation {allocation_id}"
    else:
        windows = _windows(
            [
                (m.started_at, m.ended_at)
                for m in AllocationNode.objects.filter(allocation_id=allocation_id, node_id=node_id)
            ],
            now,
            tolerance,
        )
        return [
            Contradiction(
                row_id,
                row_tenant,
                period,
                f"[{start.isoformat()}, {end.isoformat()}) is outside every membership "
                f"of node {node_id} in allocation {allocation_id}",
            )
            for row_id, row_tenant, period, start, end in pair_rows.values_list(
                "id", "tenant_id", "period", "start", "end"
            )
            if not any(lo <= start and end <= hi for lo, hi in windows)
        ]
    return [
        Contradiction(row_id, row_tenant, period, reason)
        for row_id, row_tenant, period in pair_rows.values_list("id", "tenant_id", "period")
    ]
