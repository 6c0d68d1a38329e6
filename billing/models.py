"""The billing ledger (its own database, `ledger` alias).

No foreign keys to control-plane tables: tenants, allocations and nodes are referenced by
UUID so the ledger keeps accepting usage while the control-plane database is down.

Append-only tables (price book, usage events, adjustments, billing runs) reject UPDATE,
DELETE (and TRUNCATE on PostgreSQL) with database triggers (migration 0002). Invoices may
change only while they are drafts; a finalized invoice may only become void.

Money: usage quantities are stored as exact integers of GPU-microseconds
(`quantity_micro`), so SQL sums are exact on both vendors; prices and amounts are Decimal in
`ExactDecimalField` columns (NUMERIC on PostgreSQL, fixed-point text on SQLite: never a float),
rounded half-even to the cent only on invoice lines, and never summed in SQL.
"""

from decimal import Decimal

from django.db import models

from billing.fields import ExactDecimalField
from core.ids import uuid7

MICRO = 1_000_000
MICRO_PER_HOUR = 3600 * MICRO


class Unit(models.TextChoices):
    GPU_SECOND = "gpu_second", "GPU-second"
    GPU_HOUR = "gpu_hour", "GPU-hour"
    KWH = "kwh", "kWh"  # energy lines: facility kWh (billing.services.energy_lines)


class PriceBookEntry(models.Model):
    """The price of one SKU in one price-book version. A new price is a new version's row."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    version = models.PositiveIntegerField()
    sku = models.CharField(max_length=50, help_text="instance-type name, e.g. h100-sxm-8x")
    unit = models.CharField(max_length=16, choices=Unit.choices, default=Unit.GPU_HOUR)
    unit_price = ExactDecimalField(max_digits=12, decimal_places=6)
    currency = models.CharField(max_length=3, default="USD")
    effective_from = models.DateTimeField()
    source = models.TextField(help_text="where the price comes from")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version", "sku"]
        constraints = [models.UniqueConstraint(fields=["version", "sku"], name="billing_price_version_sku_unique")]

    def __str__(self) -> str:
        return f"v{self.version} {self.sku} {self.unit_price} {self.currency}/{self.unit}"


class UsageEvent(models.Model):
    """One meter event piece, as received from a node agent.

    On PostgreSQL the table is partitioned by `period` (one partition per UTC month, created
    ahead by `billing.tasks.ensure_ledger_partitions`, detached into the `ledger_archive` schema
    by `manage.py archive_ledger_month` once a month is closed; docs/billing.md "Ledger at
    scale"). Its primary key there is (id, period): a partitioned table's keys must name the
    partition column; `id` itself comes from one sequence, so it is still unique.

    An event whose `[start, end)` crosses a month boundary is stored as one piece per month
    (`part` 0, 1, ...), its quantity apportioned by time, so rating a period is a plain SUM
    over that period's rows. `id` is the ledger sequence: billing runs record the highest id
    they rated (their watermark).
    """

    id = models.BigAutoField(primary_key=True)
    event_id = models.CharField(max_length=100)
    part = models.PositiveSmallIntegerField(default=0)
    tenant_id = models.UUIDField()
    allocation_id = models.UUIDField()
    node_id = models.UUIDField()
    sku = models.CharField(max_length=50)
    start = models.DateTimeField()
    end = models.DateTimeField()
    period = models.DateField(help_text="first day of the month this piece falls in")
    quantity_micro = models.BigIntegerField(help_text="GPU-microseconds in [start, end)")
    unit = models.CharField(max_length=16, choices=Unit.choices, default=Unit.GPU_SECOND)
    payload_hash = models.CharField(max_length=64, help_text="SHA-256 of the event as sent (canonical JSON)")
    received_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        constraints = [
            # With `period` so the partitioned table can enforce it; a piece's period follows from
            # its start, and ingest looks an event id up in every partition before inserting.
            models.UniqueConstraint(
                fields=["event_id", "part", "period"], name="billing_usage_event_part_period_unique"
            ),
            models.CheckConstraint(condition=models.Q(end__gt=models.F("start")), name="billing_usage_end_after_start"),
            models.CheckConstraint(condition=models.Q(quantity_micro__gte=0), name="billing_usage_quantity_nonneg"),
        ]
        indexes = [
            models.Index(fields=["period", "tenant_id", "sku"], name="billing_usage_period_idx"),
            models.Index(fields=["tenant_id", "start"], name="billing_usage_tenant_start_idx"),
            # ingest's per-interval bound: a node's rows that end after a batch's first start
            models.Index(fields=["node_id", "end"], name="billing_usage_node_end_idx"),
        ]

    @property
    def quantity(self) -> Decimal:
        return Decimal(self.quantity_micro) / MICRO


class UsageSpan(models.Model):
    """First start, last end and highest id of the usage rows of one (month, allocation, node,
    tenant), kept by the database itself: a trigger widens it in the statement that inserts
    the rows (migration 0010), whatever inserts them, so it covers every row of the ledger
    (attached or archived; usage rows are never changed or deleted).

    What a billing run's reconciliation reads instead of grouping the month's rows by
    allocation and node (billing.services.rating.run_spans). It only ever decides which
    (allocation, node, tenant) pairs need their rows read: a span wider than the run's rows
    (rows above the run's watermark, or already disputed) at worst has a pair's rows read and
    checked one by one; the rows decide, never this table."""

    period = models.DateField()
    allocation_id = models.UUIDField()
    node_id = models.UUIDField()
    tenant_id = models.UUIDField()
    first_start = models.DateTimeField()
    last_end = models.DateTimeField()
    last_id = models.BigIntegerField(help_text="the highest usage-event id of the pair in the month")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["period", "allocation_id", "node_id", "tenant_id"], name="billing_usage_span_unique"
            ),
        ]


class AdjustmentKind(models.TextChoices):
    SLA_CREDIT = "sla_credit", "SLA credit"
    LATE_USAGE = "late_usage", "Late usage"
    MANUAL = "manual", "Manual adjustment"


class Adjustment(models.Model):
    """A correction, never an edit: SLA credits and manual credit notes or charges.

    `amount` is signed (credits are negative). `reference` names what it corrects (an
    incident, an invoice number). `dedupe_key` makes recording the same credit twice a no-op.
    """

    id = models.BigAutoField(primary_key=True)
    public_id = models.UUIDField(default=uuid7, unique=True, editable=False)
    kind = models.CharField(max_length=16, choices=AdjustmentKind.choices)
    tenant_id = models.UUIDField()
    allocation_id = models.UUIDField(null=True, blank=True)
    node_id = models.UUIDField(null=True, blank=True)
    sku = models.CharField(max_length=50, blank=True)
    start = models.DateTimeField(null=True, blank=True)
    end = models.DateTimeField(null=True, blank=True)
    period = models.DateField(help_text="first day of the month it applies to")
    quantity_micro = models.BigIntegerField(default=0, help_text="GPU-microseconds it concerns")
    amount = ExactDecimalField(
        max_digits=18,
        decimal_places=6,
        help_text="signed; for an SLA credit the uncapped amount (rating applies the cap)",
    )
    currency = models.CharField(max_length=3, default="USD")
    reason = models.TextField()
    reference = models.CharField(max_length=200, blank=True)
    dedupe_key = models.CharField(max_length=200, unique=True)
    # SLA credits: what the amount was computed from, so a line can be recomputed from what it shows.
    gpus = models.PositiveIntegerField(null=True, blank=True)
    unit_price = ExactDecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="list price per GPU-hour in force during [start, end)",
    )
    price_version = models.PositiveIntegerField(null=True, blank=True)
    rate = ExactDecimalField(
        max_digits=9,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="share of the list price credited (the SLA policy's rate)",
    )
    sla_policy = models.ForeignKey("SlaPolicy", null=True, blank=True, on_delete=models.PROTECT, related_name="credits")
    actor = models.CharField(max_length=200, blank=True, help_text="who recorded it")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["period", "tenant_id"], name="billing_adjustment_period_idx")]


class InvoiceStatus(models.TextChoices):
    DRAFT = "draft", "Draft (upcoming)"
    FINALIZED = "finalized", "Finalized"
    VOID = "void", "Void"


class Invoice(models.Model):
    """One tenant's invoice for one month. Numbers are assigned at finalization, gapless per
    issuer (InvoiceCounter, in the same transaction)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant_id = models.UUIDField()
    period = models.DateField(help_text="first day of the billed month")
    issuer = models.CharField(max_length=50, default="hangar")
    number = models.CharField(max_length=50, null=True, blank=True)
    status = models.CharField(max_length=16, choices=InvoiceStatus.choices, default=InvoiceStatus.DRAFT)
    currency = models.CharField(max_length=3, default="USD")
    total = ExactDecimalField(max_digits=18, decimal_places=2, default=Decimal("0.00"))
    billing_run_id = models.UUIDField(null=True, blank=True)
    replaces = models.OneToOneField(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="replaced_by",
        help_text="the void invoice this one re-issues",
    )
    void_reason = models.TextField(blank=True)
    voided_at = models.DateTimeField(null=True, blank=True)
    voided_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    finalized_at = models.DateTimeField(null=True, blank=True)
    # Copied from the tenant's billing profile when the invoice is finalized, so a later change
    # of rate or terms never changes an issued invoice (drafts show the profile's current values).
    tax_rate_percent = ExactDecimalField(max_digits=5, decimal_places=2, null=True, blank=True)
    due_on = models.DateField(null=True, blank=True, help_text="issue date + the tenant's payment terms")
    # The parties as they were when the invoice was finalized (seller from settings, bill-to from
    # the tenant's billing profile), so a later change of address never rewrites an issued
    # invoice. Null on drafts and on invoices finalized before these columns existed: those show
    # the current values and say so.
    seller_name = models.CharField(max_length=200, null=True, blank=True)
    seller_address = models.TextField(null=True, blank=True, help_text="one line per line")
    seller_tax_id = models.CharField(max_length=64, null=True, blank=True)
    bill_to_name = models.CharField(max_length=200, null=True, blank=True)
    bill_to_address = models.TextField(null=True, blank=True, help_text="one line per line")
    bill_to_tax_id = models.CharField(max_length=64, null=True, blank=True)

    class Meta:
        ordering = ["-period", "tenant_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant_id", "period"],
                condition=~models.Q(status="void"),
                name="billing_invoice_tenant_period_unique",
            ),
            models.UniqueConstraint(fields=["issuer", "number"], name="billing_invoice_issuer_number_unique"),
        ]

    def __str__(self) -> str:
        return self.number or f"draft {self.period:%Y-%m} {self.tenant_id}"


class LineKind(models.TextChoices):
    USAGE = "usage", "Usage"
    LATE_USAGE = "late_usage", "Late usage (earlier period)"
    SLA_CREDIT = "sla_credit", "SLA credit"
    MANUAL = "manual", "Manual adjustment"
    ENERGY = "energy", "Energy (pass-through)"


class InvoiceLine(models.Model):
    """One line; frozen (by trigger) once its invoice is finalized."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="lines")
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=LineKind.choices)
    sku = models.CharField(max_length=50, blank=True)
    description = models.CharField(max_length=300)
    usage_period = models.DateField(help_text="the month the usage or credit belongs to")
    quantity = ExactDecimalField(
        max_digits=20, decimal_places=6, help_text="GPU-hours, rounded for display (facility kWh on an energy line)"
    )
    quantity_micro = models.BigIntegerField(default=0, help_text="exact GPU-microseconds the amount is computed from")
    unit = models.CharField(max_length=16, choices=Unit.choices, default=Unit.GPU_HOUR)
    unit_price = ExactDecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="list price per GPU-hour (per kWh on an energy line) in force for this line",
    )
    rate = ExactDecimalField(
        max_digits=9,
        decimal_places=6,
        default=Decimal("1"),
        help_text="share of the unit price charged (SLA credits: the policy's rate)",
    )
    price_version = models.PositiveIntegerField(null=True, blank=True, help_text="price-book version of unit_price")
    start = models.DateTimeField(null=True, blank=True, help_text="the time range this line covers")
    end = models.DateTimeField(null=True, blank=True)
    amount = ExactDecimalField(max_digits=18, decimal_places=2)
    note = models.CharField(max_length=300, blank=True, help_text="how the amount was rounded or capped")
    reference = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["invoice", "position"]
        constraints = [models.UniqueConstraint(fields=["invoice", "position"], name="billing_line_position_unique")]

    @property
    def gpu_seconds(self) -> Decimal:
        """The exact quantity: GPU-microseconds written as GPU-seconds (6 places, no rounding)."""
        return Decimal(self.quantity_micro).scaleb(-6)


class SlaPolicy(models.Model):
    """An SLA credit policy, as data. A change is a new row (a higher `version` of the same `key`).

    The policy in force for a tenant at time t: the tenant's own rows if it has any, else the
    default rows (tenant_id NULL); among them the highest version with effective_from ≤ t.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    key = models.SlugField(max_length=50)
    version = models.PositiveIntegerField()
    tenant_id = models.UUIDField(null=True, blank=True, help_text="NULL: the default for every tenant")
    name = models.CharField(max_length=100)
    attributions = models.CharField(
        max_length=100, default="provider", help_text="comma-separated incident attributions that earn a credit"
    )
    credit_rate = ExactDecimalField(
        max_digits=9,
        decimal_places=6,
        help_text="share of the list price of the lost GPU-time credited (1 = all of it)",
    )
    cap_percent = ExactDecimalField(
        max_digits=7,
        decimal_places=2,
        help_text="credits for one allocation and month ≤ this % of its charge that month",
    )
    effective_from = models.DateTimeField()
    source = models.TextField(help_text="where the terms come from")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["key", "-version"]
        constraints = [models.UniqueConstraint(fields=["key", "version"], name="billing_sla_policy_key_version")]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"

    @property
    def counted_attributions(self) -> set[str]:
        return {a.strip() for a in self.attributions.split(",") if a.strip()}


class CreditNote(models.Model):
    """A numbered document that reduces what a finalized invoice asks for; never edited.

    Its lines name the invoice lines they credit; the credited amount of a line over all its
    credit notes never exceeds what the line billed."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    number = models.CharField(max_length=50, unique=True)
    issuer = models.CharField(max_length=50)
    tenant_id = models.UUIDField()
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="credit_notes")
    currency = models.CharField(max_length=3, default="USD")
    total = ExactDecimalField(max_digits=18, decimal_places=2, help_text="amount credited (positive)")
    # The invoice's frozen tax rate and the tax this note gives back (NULL: a note from before
    # tax was recorded on credit notes, read as 0). total + tax is what the tenant gets back.
    tax_rate_percent = ExactDecimalField(max_digits=5, decimal_places=2, null=True, blank=True)
    tax = ExactDecimalField(max_digits=18, decimal_places=2, null=True, blank=True, help_text="tax credited")
    reason = models.TextField()
    actor = models.CharField(max_length=200)
    issued_at = models.DateTimeField()

    @property
    def total_including_tax(self) -> Decimal:
        return self.total + (self.tax or Decimal("0.00"))

    class Meta:
        ordering = ["-issued_at"]

    def __str__(self) -> str:
        return self.number


class CreditNoteLine(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    credit_note = models.ForeignKey(CreditNote, on_delete=models.PROTECT, related_name="lines")
    position = models.PositiveIntegerField()
    invoice_line = models.ForeignKey(InvoiceLine, on_delete=models.PROTECT, related_name="credit_note_lines")
    description = models.CharField(max_length=300)
    amount = ExactDecimalField(max_digits=18, decimal_places=2, help_text="amount credited (positive)")

    class Meta:
        ordering = ["credit_note", "position"]
        constraints = [models.UniqueConstraint(fields=["credit_note", "position"], name="billing_cnline_position")]

    def __str__(self) -> str:
        return f"{self.credit_note_id} line {self.position}"


class LedgerArchiveAction(models.TextChoices):
    ARCHIVED = "archived", "Archived (detached)"
    RESTORED = "restored", "Restored (re-attached)"
    DROPPED = "dropped", "Dropped after export"


class LedgerArchiveRecord(models.Model):
    """What `manage.py archive_ledger_month` did to one month's usage partition (append-only).

    The counts are read from the partition as it was detached, so a restore (or an auditor
    loading the export) can check the month came back whole: same rows, same GPU-microseconds,
    same id range, and, for an export, the same SHA-256 of the file.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    period = models.DateField(help_text="first day of the month")
    action = models.CharField(max_length=16, choices=LedgerArchiveAction.choices)
    partition = models.CharField(max_length=100, help_text="the partition's table name")
    location = models.CharField(max_length=300, help_text="schema.table of the detached rows, or the export file")
    rows = models.BigIntegerField()
    quantity_micro = models.BigIntegerField(help_text="sum of GPU-microseconds in the partition")
    first_id = models.BigIntegerField(null=True, blank=True)
    last_id = models.BigIntegerField(null=True, blank=True)
    export_path = models.CharField(max_length=500, blank=True)
    export_sha256 = models.CharField(max_length=64, blank=True)
    actor = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["period", "created_at"], name="billing_archive_period_idx")]

    def __str__(self) -> str:
        return f"{self.period:%Y-%m} {self.action} ({self.rows} rows)"


class InvoiceCounter(models.Model):
    """The last invoice number issued per issuer; incremented under a row lock at finalization."""

    issuer = models.CharField(max_length=50, primary_key=True)
    last_number = models.PositiveIntegerField(default=0)


class BillingRun(models.Model):
    """One rating of a period, written once at the end of the run's transaction."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    period = models.DateField()
    finalize = models.BooleanField(default=False)
    price_book_version = models.PositiveIntegerField()
    watermark = models.BigIntegerField(help_text="highest usage-event id rated")
    adjustment_watermark = models.BigIntegerField(help_text="highest adjustment id rated")
    prior_watermark = models.BigIntegerField(
        default=0,
        help_text="watermark of the last finalized run before this one: rows of finalized periods "
        "above it and up to `watermark` are this run's late usage",
    )
    prior_adjustment_watermark = models.BigIntegerField(default=0)
    # The dispute decisions the run saw (its frozen scope, so a re-issue re-rates exactly what
    # it billed): disputes with id ≤ dispute_watermark existed, and of those the ones decided
    # with decision_seq ≤ decision_watermark had their decision. NULL: a run from before these
    # were recorded (its re-issue reads the disputes as they are now).
    dispute_watermark = models.BigIntegerField(null=True, blank=True, help_text="highest dispute id the run saw")
    decision_watermark = models.BigIntegerField(
        null=True, blank=True, help_text="highest dispute decision number the run saw"
    )
    invoices = models.PositiveIntegerField()
    output_hash = models.CharField(max_length=64)
    actor = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["period", "finalize"], name="billing_run_period_idx")]


class RejectionCode(models.TextChoices):
    """Why ingest refused a meter event (the `code` of the 202 answer's `rejected` entries)."""

    GRANT_MISSING = "grant_missing", "No metering grant"
    GRANT_INVALID = "grant_invalid", "Grant forged, unreadable or expired"
    OUTSIDE_GRANT = "outside_grant", "Outside its grant (node, tenant, allocation, SKU or time)"
    QUANTITY_EXCEEDS_GRANT = "quantity_exceeds_grant", "More than GPUs × seconds"
    EXCEEDS_INTERVAL = "exceeds_interval_capacity", "With the node's other usage, more than GPUs × wall-clock time"
    EVENT_ID_IN_USE = "event_id_in_use", "Event id already recorded by another node"


class RejectedMeterEvent(models.Model):
    """A meter event ingest refused: never charged, kept as sent so an operator can see who
    tried what (append-only, like the usage it would have been)."""

    id = models.BigAutoField(primary_key=True)
    event_id = models.CharField(max_length=100)
    node_id = models.UUIDField(help_text="the node whose agent token sent it")
    tenant_id = models.UUIDField(help_text="the tenant the event named (not necessarily the node's)")
    allocation_id = models.UUIDField()
    sku = models.CharField(max_length=50)
    start = models.DateTimeField()
    end = models.DateTimeField()
    quantity_micro = models.BigIntegerField()
    code = models.CharField(max_length=32, choices=RejectionCode.choices)
    detail = models.CharField(max_length=500)
    grant = models.TextField(blank=True, help_text="the grant as sent (may be forged)")
    payload_hash = models.CharField(max_length=64)
    received_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node_id", "event_id", "payload_hash", "code"], name="billing_rejected_event_unique"
            )
        ]

    def __str__(self) -> str:
        return f"refused {self.event_id} from node {self.node_id}: {self.code}"

    @property
    def quantity(self) -> Decimal:
        return Decimal(self.quantity_micro) / MICRO


class RejectedMeterTally(models.Model):
    """Every refused meter event counted, per node, hour and code, whether or not it was kept.

    Ingest keeps refused events as rows (RejectedMeterEvent) only up to a budget per node and
    hour (METER_REJECTED_SAMPLE_PER_NODE_HOUR): a rented node's agent token can send thousands of
    invalid events a minute, and a row each would let it fill the ledger's disk. Past the budget
    a refusal only moves its counters here: how many, how many GPU-seconds they claimed, the
    first and last seen. Counters, not evidence: the only ledger table that is updated."""

    id = models.BigAutoField(primary_key=True)
    node_id = models.UUIDField()
    hour = models.DateTimeField(help_text="the UTC hour the refusals were received in")
    code = models.CharField(max_length=32, choices=RejectionCode.choices)
    refused = models.PositiveBigIntegerField(default=0)
    sampled = models.PositiveBigIntegerField(default=0, help_text="of which kept as RejectedMeterEvent rows")
    quantity_micro = models.DecimalField(max_digits=38, decimal_places=0, default=0, help_text="GPU-µs claimed")
    first_received_at = models.DateTimeField()
    last_received_at = models.DateTimeField()
    last_event_id = models.CharField(max_length=100, blank=True)

    class Meta:
        ordering = ["-hour", "node_id", "code"]
        constraints = [
            models.UniqueConstraint(fields=["node_id", "hour", "code"], name="billing_rejected_tally_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.refused} {self.code} from {self.node_id} in {self.hour:%Y-%m-%d %H}h ({self.sampled} kept)"

    @property
    def quantity_seconds(self) -> Decimal:
        return Decimal(self.quantity_micro) / MICRO


class DisputeStatus(models.TextChoices):
    OPEN = "open", "Open (not rated)"
    ACCEPTED = "accepted", "Accepted (rated)"
    REJECTED = "rejected", "Rejected (never rated)"


class UsageDispute(models.Model):
    """Usage whose grant verified but which the control plane's allocation history contradicts.

    Held out of rating while open or rejected; an operator resolves it (billing.services.disputes).
    Usage rows stay append-only: the dispute is the only thing that changes.
    """

    id = models.BigAutoField(primary_key=True)
    public_id = models.UUIDField(default=uuid7, unique=True, editable=False)
    # No database constraint: a partitioned table has no unique key on `id` alone to point at,
    # and an archived month's events leave the table while their resolved disputes stay.
    usage_event = models.OneToOneField(
        UsageEvent, on_delete=models.PROTECT, related_name="dispute", db_constraint=False
    )
    tenant_id = models.UUIDField()
    period = models.DateField()
    reason = models.CharField(max_length=500)
    status = models.CharField(max_length=16, choices=DisputeStatus.choices, default=DisputeStatus.OPEN)
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=200, blank=True)
    resolution_note = models.TextField(blank=True)
    decision_seq = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="order of the decision among all dispute decisions (runs record the highest they saw)",
    )
    adjustment = models.ForeignKey(
        Adjustment,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        help_text="the late-usage charge, when accepted after its period was finalized",
    )

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["status", "period"], name="billing_dispute_status_idx")]
        permissions = [("resolve_usagedispute", "Can accept or reject disputed usage")]

    def __str__(self) -> str:
        return f"dispute {self.public_id} ({self.status})"


# Usage that may be rated or shown as charges: not disputed, or disputed and accepted.
BILLABLE_USAGE = models.Q(dispute__isnull=True) | models.Q(dispute__status=DisputeStatus.ACCEPTED)


class VerificationRun(models.Model):
    """One pass of the independent verifier (billing.verifier): when, what it read, what it
    found. The console's /billing/verification/ shows the last one."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    invoices = models.PositiveIntegerField(help_text="live invoices recomputed")
    credit_notes = models.PositiveIntegerField(default=0)
    runs = models.PositiveIntegerField(default=0, help_text="billing runs whose scope was rebuilt")
    usage_rows = models.PositiveBigIntegerField(default=0, help_text="ledger rows read")
    difference_count = models.PositiveIntegerField()
    differences = models.JSONField(default=list, help_text="the first 500 differences, as found")
    actor = models.CharField(max_length=200)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"verification {self.started_at:%Y-%m-%d %H:%M}: {self.difference_count} differences"
