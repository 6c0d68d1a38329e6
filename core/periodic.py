"""The one registry of periodic tasks (Celery beat, django-celery-beat DatabaseScheduler).

`manage.py setup_periodic_tasks` writes these rows idempotently; `run_loops` uses the same
list for machines without Celery. Intervals follow docs/design ("Control loops").
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class PeriodicSpec:
    name: str
    task: str
    every_seconds: int | None = None
    crontab: str | None = None  # "minute hour day_of_month month_of_year day_of_week"
    expires_seconds: int | None = None  # a run that could not start in time is dropped, not queued up


PERIODIC_TASKS: tuple[PeriodicSpec, ...] = (
    PeriodicSpec("purge expired idempotency keys", "core.tasks.purge_idempotency_keys", crontab="17 3 * * *"),
    PeriodicSpec(
        "fleet utilisation snapshot", "fleet.tasks.record_fleet_snapshot", every_seconds=300, expires_seconds=240
    ),
    # The power history's minute points, then the rack power condition that reads them.
    PeriodicSpec("fleet power history", "fleet.tasks.record_power_history", every_seconds=60, expires_seconds=50),
    PeriodicSpec("rack power condition", "health.tasks.rack_power_check", every_seconds=60, expires_seconds=50),
    # Out of band: every BMC's power state, and the power actions waiting to be sent (docs/bmc.md).
    PeriodicSpec("bmc power sync", "fleet.tasks.bmc_power_sync", every_seconds=60, expires_seconds=50),
    # The notification outbox: pages, webhooks and e-mails that are due (docs/notifications.md).
    PeriodicSpec("deliver notifications", "core.tasks.deliver_notifications", every_seconds=10, expires_seconds=10),
    # ... and their retention: delivered events purged after NOTIFY_RETENTION_DAYS, in batches.
    PeriodicSpec(
        "purge delivered notifications", "core.tasks.purge_notifications", every_seconds=3600, expires_seconds=3000
    ),
    # Paging follows the incidents: page, escalate an unacknowledged page, resolve.
    PeriodicSpec("incident paging", "health.tasks.page_incidents", every_seconds=30, expires_seconds=30),
    PeriodicSpec("health sweep", "health.tasks.health_sweep", every_seconds=30, expires_seconds=30),
    PeriodicSpec("reconcile nodes", "fleet.tasks.reconcile_nodes", every_seconds=10, expires_seconds=10),
    PeriodicSpec("bring-up ladder", "fleet.tasks.advance_bring_up", every_seconds=30, expires_seconds=30),
    PeriodicSpec("rolling upgrades", "fleet.tasks.advance_rollouts", every_seconds=30, expires_seconds=30),
    PeriodicSpec("allocation loop", "tenants.tasks.allocation_loop", every_seconds=10, expires_seconds=10),
    # Drafts hourly; a closed month is finalized on the first hourly check after its grace
    # period (BILLING_FINALIZE_GRACE_HOURS), i.e. on the 1st.
    PeriodicSpec(
        "billing: refresh draft invoices",
        "billing.tasks.refresh_draft_invoices",
        every_seconds=3600,
        expires_seconds=3000,
    ),
    PeriodicSpec(
        "billing: ledger partitions ahead",
        "billing.tasks.ensure_ledger_partitions",
        every_seconds=3600,
        expires_seconds=3000,
    ),
    PeriodicSpec(
        "billing: finalize closed months",
        "billing.tasks.finalize_closed_periods",
        crontab="35 * * * *",
        expires_seconds=3000,
    ),
    # Nightly: the independent verifier recomputes every live invoice (docs/billing.md, "Verifier").
    PeriodicSpec(
        "billing: verify invoices",
        "billing.tasks.verify_invoices",
        crontab="50 2 * * *",
        expires_seconds=3600,
    ),
)
