"""Reconciliation: ledger usage against allocation history, both ways (read-only).

For a period, every (allocation, node) membership that overlapped it for at least
`min_overlap` (default 10 minutes, a few meter intervals) must have metering in the
ledger, and every metered (allocation, node) pair must match a membership of that
allocation and tenant overlapping the period. Anything else is a gap: a node running a
tenant's workload unbilled, or billing with no allocation behind it.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, timedelta
from uuid import UUID

from django.db.models import Max, Min, Q, Sum
from django.utils import timezone

from billing.models import UsageEvent
from billing.periods import format_period, period_end, period_start
from billing.selectors import archived_periods
from core.errors import Conflict
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


def _pair_rows(rows, span: dict):
    # Built only for a span that needs its rows read: building a queryset per span cost a
    # 10,000-tenant run seconds even when every span lay inside its membership.
    return rows.filter(allocation_id=span["allocation_id"], node_id=span["node_id"], tenant_id=span["tenant_id"])


def contradicted_usage(*, scope: Q, tolerance: timedelta, now=None) -> list[Contradiction]:
    """Usage rows in `scope` (not yet disputed) that the allocation history contradicts: the node
    was never in that allocation, the allocation belongs to another tenant, or the row lies
    outside every membership of the node in it (beyond `tolerance`).

    Every row passed its grant's signature check; this is the second, control-plane opinion.
    Cost: one grouped query over the scope and one membership query per 1,000 allocations; rows
    are read one by one only for (allocation, node) pairs whose span is not inside a membership.
    """
    now = now or timezone.now()
    rows = UsageEvent.objects.using(LEDGER).filter(scope, dispute__isnull=True)
    spans = list(
        rows.values("allocation_id", "node_id", "tenant_id").annotate(first=Min("start"), last=Max("end")).order_by()
    )
    allocation_ids = sorted({s["allocation_id"] for s in spans}, key=str)
    owners: dict = {}
    memberships: dict = defaultdict(list)
    for lo in range(0, len(allocation_ids), 1000):
        for allocation_id, node_id, tenant_id, started, ended in AllocationNode.objects.filter(
            allocation_id__in=allocation_ids[lo : lo + 1000]
        ).values_list("allocation_id", "node_id", "allocation__tenant_id", "started_at", "ended_at"):
            owners[allocation_id] = tenant_id
            memberships[(allocation_id, node_id)].append((started, ended))
    out: list[Contradiction] = []
    for span in spans:
        pair = (span["allocation_id"], span["node_id"])
        owner = owners.get(pair[0])
        if owner is not None and owner != span["tenant_id"]:
            reason = f"metered to tenant {span['tenant_id']}, but the allocation belongs to tenant {owner}"
        elif pair not in memberships:
            reason = f"node {pair[1]} was never in allocation {pair[0]}"
        else:
            windows = _windows(memberships[pair], now, tolerance)
            if any(lo <= span["first"] and span["last"] <= hi for lo, hi in windows):
                continue
            for row_id, tenant_id, period, start, end in _pair_rows(rows, span).values_list(
                "id", "tenant_id", "period", "start", "end"
            ):
                if not any(lo <= start and end <= hi for lo, hi in windows):
                    out.append(
                        Contradiction(
                            row_id,
                            tenant_id,
                            period,
                            f"[{start.isoformat()}, {end.isoformat()}) is outside every membership "
                            f"of node {pair[1]} in allocation {pair[0]}",
                        )
                    )
            continue
        out.extend(
            Contradiction(row_id, tenant_id, period, reason)
            for row_id, tenant_id, period in _pair_rows(rows, span).values_list("id", "tenant_id", "period")
        )
    return out
