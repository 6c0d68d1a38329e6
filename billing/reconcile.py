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

from django.db.models import Q, Sum
from django.utils import timezone

from billing.models import UsageEvent
from billing.periods import period_end, period_start
from tenants.models import AllocationNode

LEDGER = "ledger"


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

    start, end = period_start(period), period_end(period)
    now = timezone.now()
    memberships = (AllocationNode.objects.filter(started_at__lt=end)
                   .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
                   .values_list("allocation_id", "node_id", "allocation__tenant_id", "started_at", "ended_at"))
    allocated = {}
    for allocation_id, node_id, tenant_id, started, ended in memberships:
        overlap = min(ended or now, end, now) - max(started, start)
        key = (allocation_id, node_id)
        allocated[key] = (tenant_id, max(overlap, allocated.get(key, (None, timedelta(0)))[1]))
    metered = {(row["allocation_id"], row["node_id"]): (row["tenant_id"], row["micro"]) for row in
               UsageEvent.objects.using(LEDGER).filter(period=period)
               .values("allocation_id", "node_id", "tenant_id").annotate(micro=Sum("quantity_micro"))}
    report = ReconcileReport(period=period, memberships=len(allocated), metered_pairs=len(metered))
    for (allocation_id, node_id), (tenant_id, overlap) in sorted(allocated.items(), key=str):
        if overlap >= min_overlap and (allocation_id, node_id) not in metered:
            report.unmetered.append(Gap(allocation_id, node_id, tenant_id,
                                        f"allocated for {overlap} in the period, no meter events"))
    for (allocation_id, node_id), (tenant_id, micro) in sorted(metered.items(), key=str):
        owner = allocated.get((allocation_id, node_id))
        if owner is None:
            report.unallocated.append(Gap(allocation_id, node_id, tenant_id,
                                          f"{micro / 3.6e9:.2f} GPU-h metered, no allocation membership in the period"))
        elif owner[0] != tenant_id:
            report.unallocated.append(Gap(allocation_id, node_id, tenant_id,
                                          f"metered to tenant {tenant_id}, allocation belongs to {owner[0]}"))
    return report
