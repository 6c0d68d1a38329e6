"""Reads of the billing ledger for the API, portal and console."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.db import connection, models
from django.db.models import Count, Prefetch, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from billing.grants import MeteringGrant, grant_window, sign_grant
from billing.models import (
    BILLABLE_USAGE,
    BillingRun,
    CreditNote,
    DisputeStatus,
    Invoice,
    InvoiceLine,
    LedgerArchiveAction,
    LedgerArchiveRecord,
    RejectedMeterEvent,
    RejectedMeterTally,
    SlaPolicy,
    Unit,
    UsageDispute,
    UsageEvent,
)
from billing.periods import period_of
from billing.services.rating import Price, PriceBook, gpu_hours, price_buckets, usage_buckets
from fleet.choices import AgentActionState
from fleet.models import Node, NodeAgentAction, NodeType
from tenants.models import Allocation, AllocationNode

LEDGER = "ledger"


@dataclass(frozen=True)
class UsageRow:
    sku: str
    period: date
    quantity: Decimal  # GPU-hours (6 places, for reading)
    quantity_micro: int  # exact GPU-microseconds
    unit: str
    unit_price: Decimal
    price_version: int
    start: datetime  # when this price was in force (within the period)
    end: datetime
    amount: Decimal
    currency: str

    @property
    def gpu_seconds(self) -> Decimal:
        return Decimal(self.quantity_micro).scaleb(-6)


@dataclass(frozen=True)
class UsageReport:
    rows: list[UsageRow]
    as_of: datetime  # the ledger and price book as they stood at this moment
    # Months of the window whose usage rows were archived out of the ledger: the rows above
    # leave them out, and their finalized invoices (frozen lines) are the record.
    archived_periods: tuple[date, ...] = ()


def archived_periods() -> set[date]:
    """Months whose latest archive action left them out of the ledger (archived or dropped)."""
    latest: dict[date, str] = {}
    for period, action in (
        LedgerArchiveRecord.objects.using(LEDGER).order_by("created_at").values_list("period", "action")
    ):
        latest[period] = action
    return {period for period, action in latest.items() if action != LedgerArchiveAction.RESTORED}


def archived_periods_between(start: datetime, end: datetime) -> tuple[date, ...]:
    """The archived months that [start, end) touches, oldest first (one query)."""
    first, last = period_of(start), period_of(end - timedelta(microseconds=1))
    return tuple(sorted(p for p in archived_periods() if first <= p <= last))


def usage_by_sku(*, tenant_id, start: datetime, end: datetime, as_of: datetime | None = None) -> UsageReport:
    """Usage metered in [start, end) (by event start), priced exactly as the draft invoice prices
    it: by the price-book version in force when each interval ran, one row per month × SKU × price
    (rounded half-even to the cent per row, like an invoice line). Only usage received, and
    price-book rows created, by `as_of` count, so the figure is reproducible."""
    as_of = as_of or timezone.now()
    book = PriceBook.load(as_of=as_of)
    # usage held as disputed is left out until an operator accepts it
    usage = UsageEvent.objects.using(LEDGER).filter(
        BILLABLE_USAGE, tenant_id=tenant_id, start__gte=start, start__lt=end, received_at__lte=as_of
    )
    rows = [
        UsageRow(
            sku=u.sku,
            period=u.period,
            quantity=gpu_hours(u.quantity_micro),
            quantity_micro=u.quantity_micro,
            unit=Unit.GPU_HOUR,
            unit_price=u.price.unit_price,
            price_version=u.price.version,
            start=u.start,
            end=u.end,
            amount=u.amount,
            currency=u.price.currency,
        )
        for u in price_buckets(usage_buckets(usage, book), book)
    ]
    return UsageReport(rows=rows, as_of=as_of, archived_periods=archived_periods_between(start, end))


def daily_gpu_hours(*, tenant_id, start: datetime, end: datetime) -> dict[str, dict[date, Decimal]]:
    """{sku: {day: GPU-hours}} by event start day (UTC), for the usage chart."""
    rows = (
        UsageEvent.objects.using(LEDGER)
        .filter(BILLABLE_USAGE, tenant_id=tenant_id, start__gte=start, start__lt=end)
        .annotate(day=TruncDate("start"))
        .values("sku", "day")
        .annotate(micro=Sum("quantity_micro"))
        .order_by("sku", "day")
    )
    out: dict[str, dict[date, Decimal]] = defaultdict(dict)
    for row in rows:
        out[row["sku"]][row["day"]] = gpu_hours(row["micro"])
    return dict(out)


def invoices_for_tenant(tenant_id):
    """A tenant's invoices with their lines and credit notes (a fixed number of queries)."""
    return (
        Invoice.objects.using(LEDGER)
        .filter(tenant_id=tenant_id)
        .select_related("replaces")
        .prefetch_related(
            Prefetch("lines", queryset=InvoiceLine.objects.using(LEDGER).order_by("position")),
            Prefetch(
                "credit_notes",
                queryset=CreditNote.objects.using(LEDGER).prefetch_related("lines__invoice_line").order_by("issued_at"),
            ),
        )
    )


def invoice_for_tenant(*, tenant_id, invoice_id) -> Invoice | None:
    return invoices_for_tenant(tenant_id).filter(pk=invoice_id).first()


def recent_runs(limit: int = 20) -> list[BillingRun]:
    return list(BillingRun.objects.using(LEDGER).order_by("-started_at")[:limit])


def invoice_totals_by_tenant() -> list[dict]:
    """Per tenant and status: invoice count, net total (before tax), what credit notes credited
    (before tax) and the net left after them (the console's billing page). Summed as Decimals
    here, never by SQL (SQLite would sum them as floats)."""
    credited: dict = {}
    for invoice_id, amount in CreditNote.objects.using(LEDGER).values_list("invoice_id", "total"):
        credited[invoice_id] = credited.get(invoice_id, Decimal("0.00")) + amount
    groups: dict[tuple, dict] = {}
    for invoice_id, tenant_id, status, currency, total in (
        Invoice.objects.using(LEDGER)
        .order_by("tenant_id", "status")
        .values_list("id", "tenant_id", "status", "currency", "total")
    ):
        row = groups.setdefault(
            (tenant_id, status, currency),
            {
                "tenant_id": tenant_id,
                "status": status,
                "currency": currency,
                "count": 0,
                "total": Decimal("0.00"),
                "credited": Decimal("0.00"),
                "net_of_credit_notes": Decimal("0.00"),
            },
        )
        row["count"] += 1
        row["total"] += total
        row["credited"] += credited.get(invoice_id, Decimal("0.00"))
        row["net_of_credit_notes"] = row["total"] - row["credited"]
    return sorted(groups.values(), key=lambda r: (str(r["tenant_id"]), r["status"], r["currency"]))


def default_usage_window(now: datetime) -> tuple[datetime, datetime]:
    """This month so far."""
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return start, now + timedelta(seconds=1)


def current_prices() -> dict[str, Price]:
    """sku → the price in force now (unit price per GPU-hour and currency)."""
    return PriceBook.load().prices_at(timezone.now())


def policy_in_force(tenant_id, at: datetime) -> SlaPolicy | None:
    """The tenant's own policy rows if it has any, else the default's; the latest in force at `at`."""
    rows = list(
        SlaPolicy.objects.using(LEDGER).filter(
            Q(tenant_id=tenant_id) | Q(tenant_id__isnull=True), effective_from__lte=at
        )
    )
    own = [r for r in rows if r.tenant_id is not None]
    pool = own or rows
    return max(pool, key=lambda r: (r.effective_from, r.version), default=None)


DISPUTES_SHOWN = 200
REJECTIONS_SHOWN = 200


def open_disputes(limit: int = DISPUTES_SHOWN) -> list[UsageDispute]:
    """Oldest first (two queries however many: the disputes with their usage rows)."""
    return list(
        UsageDispute.objects.using(LEDGER)
        .filter(status=DisputeStatus.OPEN)
        .select_related("usage_event")
        .order_by("id")[:limit]
    )


def resolved_disputes(limit: int = 50) -> list[UsageDispute]:
    return list(
        UsageDispute.objects.using(LEDGER)
        .exclude(status=DisputeStatus.OPEN)
        .select_related("usage_event")
        .order_by("-resolved_at")[:limit]
    )


def dispute_by_public_id(public_id) -> UsageDispute | None:
    return UsageDispute.objects.using(LEDGER).select_related("usage_event").filter(public_id=public_id).first()


def recent_rejections(limit: int = REJECTIONS_SHOWN) -> list[RejectedMeterEvent]:
    """Meter events ingest refused, newest first."""
    return list(RejectedMeterEvent.objects.using(LEDGER).order_by("-id")[:limit])


def rejection_tallies(limit: int = REJECTIONS_SHOWN) -> list:
    """Every refusal counted, per node, hour and code, newest hour first: the whole of a flood,
    of which only the first rows of each node and hour are kept as events."""
    return list(RejectedMeterTally.objects.using(LEDGER).order_by("-hour", "-refused")[:limit])


def dispute_counts() -> dict[str, int]:
    rows = UsageDispute.objects.using(LEDGER).values("status").annotate(n=Count("id")).order_by()
    return {row["status"]: row["n"] for row in rows}


@dataclass(frozen=True)
class AgentNodeState:
    """What desired-state needs of a node, from one statement (agent_node_state)."""

    lifecycle: str
    hostname: str
    sku: str  # the node's type
    gpus: int
    has_pending_actions: bool
    memberships: tuple  # (allocation_id, tenant_id, allocation's SKU, its GPUs per node, started_at)
    # the live allocation's state and access revision (tenants.services.access), read in the
    # same statement so desired-state finds the tenant's access in the cache without a query
    allocation_state: str | None = None
    access_revision: str | None = None


def _agent_node_state_sql() -> str:
    """Hand-written, like the heartbeat's UPDATE: every agent polls every 10 s, and the ORM
    spent ~1.3 ms of CPU building each of the three queries this replaces (the statement
    itself ~0.1 ms). Pending actions are only probed here (EXISTS); they are read when there
    are some, which is rare."""
    node, node_type = Node._meta.db_table, NodeType._meta.db_table
    action, membership, allocation = (
        NodeAgentAction._meta.db_table,
        AllocationNode._meta.db_table,
        Allocation._meta.db_table,
    )
    pending = AgentActionState.PENDING.value
    return (
        f"SELECT n.lifecycle, n.hostname, t.slug, t.gpus_per_node, "
        f"EXISTS(SELECT 1 FROM {action} x WHERE x.node_id = n.id AND x.state = '{pending}'), "
        f"m.allocation_id, a.tenant_id, it.slug, it.gpus_per_node, m.started_at, a.state, a.access_revision "
        f"FROM {node} n JOIN {node_type} t ON t.id = n.node_type_id "
        f"LEFT JOIN {membership} m ON m.node_id = n.id AND m.ended_at IS NULL "
        f"LEFT JOIN {allocation} a ON a.id = m.allocation_id "
        f"LEFT JOIN {node_type} it ON it.id = a.instance_type_id "
        f"WHERE n.id = %s ORDER BY m.started_at"
    )


_AGENT_NODE_STATE = _agent_node_state_sql()
_UUID = models.UUIDField()
_MOMENT = models.DateTimeField()


def _aware(value) -> datetime:
    """A timestamp as the ORM would give it: SQLite hands back naive UTC text."""
    value = _MOMENT.to_python(value)
    return value if timezone.is_aware(value) else value.replace(tzinfo=UTC)


def agent_node_state(node_id) -> AgentNodeState | None:
    """The node, its type, whether it has pending agent actions, and its live allocation
    memberships (at most one: a partial unique index), in one statement; None for no such node."""
    with connection.cursor() as cursor:
        cursor.execute(_AGENT_NODE_STATE, [Node._meta.pk.get_db_prep_value(node_id, connection)])
        rows = cursor.fetchall()
    if not rows:
        return None
    lifecycle, hostname, sku, gpus, pending = rows[0][:5]
    memberships = tuple(
        (_UUID.to_python(allocation), _UUID.to_python(tenant), slug, per_node, _aware(started))
        for *_, allocation, tenant, slug, per_node, started, _state, _revision in rows
        if allocation is not None
    )
    state, revision = rows[0][-2:] if memberships else (None, None)
    return AgentNodeState(lifecycle, hostname, sku, gpus, bool(pending), memberships, state, revision)


def metering_grants(node_id, memberships, *, now: datetime) -> list[dict]:
    """The signed grants for `memberships` (AgentNodeState.memberships) at `now`."""
    grants = []
    for allocation_id, tenant_id, sku, gpus, started_at in memberships:
        valid_from, valid_until = grant_window(started_at=started_at, now=now)
        grant = MeteringGrant(
            node_id=node_id,
            tenant_id=tenant_id,
            allocation_id=allocation_id,
            sku=sku,
            gpus=gpus,
            valid_from=valid_from,
            valid_until=valid_until,
        )
        grants.append(
            {
                "grant": sign_grant(grant),
                "allocation_id": str(allocation_id),
                "tenant_id": str(tenant_id),
                "sku": sku,
                "gpus": gpus,
                "valid_from": valid_from,
                "valid_until": valid_until,
            }
        )
    return grants


def metering_grants_for_node(node, *, now: datetime) -> list[dict]:
    """The signed grants a node's agent attaches to its meter events: one per live allocation
    membership of the node, from the membership's start to a few hours ahead (renewed on every
    desired-state poll while the membership lives; none once it ends). One query."""
    state = agent_node_state(node.pk)
    return metering_grants(node.pk, state.memberships if state else (), now=now)
