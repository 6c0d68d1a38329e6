"""Models every app shares: the base model, the audit trail, API tokens and the
idempotency record store."""

from django.conf import settings
from django.db import models

from .choices import ApiTokenKind, DeliveryState, IdempotencyState, TenantRole
from .ids import uuid7
from .validators import validate_display_text


class BaseModel(models.Model):
    """Opaque UUID primary key and creation/update times (UTC)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class AppendOnlyQuerySet(models.QuerySet):
    """Evidence rows are written once: bulk update and delete are refused here, and on
    PostgreSQL a trigger refuses them in the database too (each app's migration adds it)."""

    def update(self, **kwargs):
        raise PermissionError(f"{self.model.__name__} rows are evidence and cannot be changed")

    def delete(self):
        raise PermissionError(f"{self.model.__name__} rows are evidence and cannot be deleted")


class AppendOnlyModel(models.Model):
    """Base of evidence tables (sanitisation records, custody transfers): rows are inserted,
    never changed or deleted, whether through the ORM or the queryset."""

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise PermissionError(f"{type(self).__name__} rows are evidence and cannot be changed")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError(f"{type(self).__name__} rows are evidence and cannot be deleted")


class AuditEvent(models.Model):
    """One write that matters: who did what to which object, the state before and after, and why."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=200, help_text="user:NAME, token:ID, agent:HOSTNAME or system:LOOP")
    action = models.CharField(max_length=100)
    object_type = models.CharField(max_length=100)
    object_id = models.CharField(max_length=64)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)
    request_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        # The admin's trail at a million rows (docs/admin.md "At scale"): each filter and search
        # reads one index in the list's order (newest first) and stops at the page.
        indexes = [
            models.Index(fields=["object_type", "object_id", "at"], name="core_audit_object_idx"),
            models.Index(fields=["object_type", "at", "id"], name="core_audit_type_at_idx"),
            models.Index(fields=["action", "at", "id"], name="core_audit_action_at_idx"),
            models.Index(fields=["actor", "at", "id"], name="core_audit_actor_at_idx"),
            models.Index(fields=["object_id", "at"], name="core_audit_objectid_at_idx"),
            models.Index(fields=["request_id"], name="core_audit_request_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.object_type}:{self.object_id}"


class ApiToken(models.Model):
    """A bearer token for the tenant or operator API. Only a SHA-256 of the value is stored;
    the plain value is shown once at creation. Agent tokens are not stored at all: they are
    HMAC-signed (core.api.agent_tokens)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    kind = models.CharField(max_length=16, choices=ApiTokenKind.choices)
    name = models.CharField(max_length=100, blank=True, validators=[validate_display_text])
    tenant = models.ForeignKey("tenants.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="tokens")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="api_tokens"
    )
    role = models.CharField(max_length=16, choices=TenantRole.choices, blank=True)
    prefix = models.CharField(max_length=16, help_text="first characters of the token, to recognise it")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="after this the token is refused; empty: it does not expire"
    )
    # An operator token's own scope: the rights its user held when it was issued (never more
    # than the issuer's). It acts with these rights as far as its user still holds them: a user
    # who loses a permission loses it for the token too; one who gains rights does not pass
    # them to tokens issued before (core.api.authentication.ScopedUser).
    scope_superuser = models.BooleanField(default=False, help_text="issued to a superuser, by a superuser")
    scope_permissions = models.JSONField(
        default=list, blank=True, help_text='the rights at issue, "app_label.codename"', editable=False
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                name="core_apitoken_owner_matches_kind",
                condition=(
                    models.Q(kind=ApiTokenKind.TENANT, tenant__isnull=False, user__isnull=True)
                    | models.Q(kind=ApiTokenKind.OPERATOR, user__isnull=False, tenant__isnull=True)
                ),
            ),
        ]

    def __str__(self) -> str:
        owner = self.tenant if self.kind == ApiTokenKind.TENANT else self.user
        return f"{self.kind} token {self.prefix}… ({owner})"


class IdempotencyRecord(models.Model):
    """What a create request with an Idempotency-Key answered, so a retry gets the same answer.

    The unique constraint on (scope, key) settles concurrent retries in the database: exactly
    one request inserts the row and does the work; the others see it in progress or done.
    """

    id = models.BigAutoField(primary_key=True)
    scope = models.CharField(max_length=100, help_text="tenant:ID or operator:ID — keys never collide across scopes")
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=500)
    body_digest = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=IdempotencyState.choices, default=IdempotencyState.IN_PROGRESS)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    response_headers = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["scope", "key"], name="core_idempotency_scope_key_unique")]

    def __str__(self) -> str:
        return f"{self.scope} {self.key} {self.state}"


class LoopClock(models.Model):
    """When each control loop last ran, so a loop can tell that it (or the whole control plane)
    was away: a gap much longer than its interval is an outage nobody could act in, and the
    deadlines that loop judges are re-armed rather than counted through it."""

    name = models.CharField(primary_key=True, max_length=50)
    last_run_at = models.DateTimeField()
    resumed_at = models.DateTimeField(null=True, blank=True, help_text="end of the last detected outage")
    last_gap_seconds = models.PositiveIntegerField(default=0, help_text="length of the last detected outage")
    outages = models.PositiveIntegerField(default=0, help_text="outages detected so far")

    def __str__(self) -> str:
        return f"{self.name} last ran {self.last_run_at:%Y-%m-%d %H:%M:%S}"


class LoopRun(models.Model):
    """Each periodic loop's last finished pass, kept in the database so `/metrics` in any web
    process sees what the Celery workers (or `run_loops`) did: the in-process registry of the
    worker that ran it is invisible to the web process that is scraped."""

    name = models.CharField(primary_key=True, max_length=80, help_text="task name's last part, e.g. health_sweep")
    last_finished_at = models.DateTimeField()
    last_duration_seconds = models.FloatField()
    runs = models.PositiveBigIntegerField(default=0)
    total_seconds = models.FloatField(default=0, help_text="sum of every pass's duration")
    failures = models.PositiveBigIntegerField(default=0, help_text="passes that raised")

    def __str__(self) -> str:
        return f"{self.name} finished {self.last_finished_at:%Y-%m-%d %H:%M:%S}"


class BeatLease(models.Model):
    """The single-beat lease: only the holder schedules periodic tasks; a second beat started by
    mistake finds a fresh lease held by someone else, refuses to schedule, and counts it."""

    name = models.CharField(primary_key=True, max_length=50)
    holder = models.CharField(max_length=200, help_text="host:pid of the beat that schedules")
    renewed_at = models.DateTimeField()
    refused_ticks = models.PositiveBigIntegerField(default=0, help_text="ticks other beats declined to schedule")
    started_at = models.DateTimeField(
        null=True, blank=True, help_text="when the holder took the lease: its loops' first due times count from here"
    )

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder}"


class LoopLease(models.Model):
    """Who runs a loop that must not hold a transaction for its whole run (core.locks.leased_run).

    A loop that waits on the network (the BMC power sync reads hundreds of BMCs) cannot take a
    transaction-level advisory lock: the transaction would hold every row it wrote, and on
    SQLite the one write lock, until the last BMC answered. The lease is taken and given back in
    transactions of their own; one left behind by a killed worker expires at `expires_at`, the
    task's hard time limit after it was taken."""

    name = models.CharField(primary_key=True, max_length=50)
    holder = models.CharField(max_length=200, blank=True, help_text="host:pid:run of the run holding it")
    expires_at = models.DateTimeField(help_text="free from this moment, whoever took it")

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder or 'nobody'} until {self.expires_at:%H:%M:%S} UTC"


class AgentTokenRevocation(models.Model):
    """The revocation list of agent tokens, one row per node that has one.

    Kept in both databases (config.db_router): meter ingest reads the ledger's copy, so it works
    while the control-plane database is down; the control-plane agent routes read theirs.
    Agent tokens carry their issue time: every token of the
    node issued before `not_before` is revoked (re-keying moves it to the new token's issue
    time); `revoked_all` ends every token of a retired or disposed node.
    """

    node_id = models.UUIDField(primary_key=True)
    not_before = models.DateTimeField(null=True, blank=True, help_text="tokens issued earlier are revoked")
    revoked_all = models.BooleanField(default=False, help_text="the node is gone: no token of it works")
    reason = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"agent tokens of {self.node_id}: " + (
            "all revoked" if self.revoked_all else f"valid from {self.not_before}"
        )


class AgentIdentityHandoff(models.Model):
    """A node's next identity, waiting to be claimed through the provisioning channel.

    Written when a node's identity is rotated at a tenancy boundary (its wipe begins): the token
    the tenant's node held is revoked at that moment, and the new one is handed out once, to
    whoever presents the one-time code published on the provisioning channel (a file the
    deployment's network-boot service serves to the node's wipe image; docs/security.md,
    "A tenant with root"). Only the code's SHA-256 is stored; the token itself is minted at the
    claim from `issued_at`, which is the node's new `not_before` on the revocation list."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node_id = models.UUIDField(db_index=True)
    issued_at = models.DateTimeField(help_text="the new identity's issue time (the node's not_before)")
    code_digest = models.CharField(max_length=64, unique=True, editable=False)
    reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    claimed_from = models.CharField(max_length=64, blank=True, help_text="the address the claim came from")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        state = f"claimed {self.claimed_at:%Y-%m-%d %H:%M}" if self.claimed_at else "waiting"
        return f"identity handoff of {self.node_id} ({state})"


class SearchEntry(models.Model):
    """One identifier of one object, normalised for lookup (core.search): what the console's
    search box and the operator API's search read. Written by the owning apps' registrations
    (post_save/post_delete, plus explicit calls on their bulk paths); `manage.py
    rebuild_search_index` rewrites it from the source tables.

    `value` is compared byte-wise (PostgreSQL: COLLATE "C", set by the migration; SQLite: its
    default BINARY), so one b-tree serves both exact and prefix lookups as a range scan in index
    order, whatever the database's default collation."""

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=32, help_text="which identifier: hostname, gpu_uuid, drive_serial, …")
    object_id = models.CharField(max_length=64, help_text="primary key of the object the identifier is on")
    value = models.CharField(max_length=255, help_text="the identifier, normalised (core.search.normalise)")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "object_id"], name="core_searchentry_kind_object_unique"),
        ]
        indexes = [
            # the console search: every kind, in value order (exact first, then by prefix)
            models.Index(fields=["value", "kind", "object_id"], name="core_searchentry_lookup_idx"),
            # the admin's searches: a few kinds each, by value
            models.Index(fields=["kind", "value"], name="core_search_kind_value_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.value} → {self.object_id}"


class OutboxEvent(models.Model):
    """Something people outside the control plane must hear about, written in the same
    transaction as the change that caused it (core.outbox.emit): a rolled-back change leaves no
    event, a committed one always has its event. `dedup_key` makes the same happening one event
    however many times the code path that saw it runs."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    topic = models.CharField(max_length=80, db_index=True, help_text="e.g. incident.trigger, allocation.degraded")
    dedup_key = models.CharField(max_length=200, unique=True)
    audience = models.CharField(max_length=80, blank=True, db_index=True, help_text="operators, or tenant:<id>")
    subject = models.CharField(max_length=200, blank=True, help_text="what it is about, e.g. incident:<id>")
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.topic} {self.dedup_key}"


class OutboxDelivery(models.Model):
    """One event to one destination (a channel kind registered with core.outbox and the id of
    its row): retried with exponential backoff, dead-lettered when out of attempts. A replay is
    a new delivery of the same event to the same destination (`replay_of`)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    event = models.ForeignKey(OutboxEvent, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=40, help_text="the registered channel kind")
    target = models.CharField(max_length=64, help_text="id of the channel's destination row")
    audience = models.CharField(max_length=80, blank=True, db_index=True, help_text="copied from the event")
    state = models.CharField(max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(help_text="not before this moment (also the claim of a running attempt)")
    last_error = models.CharField(max_length=500, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    replay_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replays")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "next_attempt_at"], name="core_delivery_due")]
        constraints = [
            models.UniqueConstraint(
                fields=["event", "channel", "target"],
                condition=models.Q(replay_of__isnull=True),
                name="core_delivery_once_per_destination",
            )
        ]

    def __str__(self) -> str:
        return f"{self.event.topic} to {self.channel}:{self.target} ({self.state})"


class DeliveryAttempt(models.Model):
    """The delivery log: one row per attempt, what was answered, how long it took."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    delivery = models.ForeignKey(OutboxDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    at = models.DateTimeField()
    ok = models.BooleanField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    detail = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{'ok' if self.ok else 'failed'} at {self.at:%H:%M:%S}"
