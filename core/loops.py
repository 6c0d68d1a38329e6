"""Control loops that `manage.py run_loops` drives on a machine without Celery: (name, dotted
callable taking no arguments, interval in seconds). Each callable is the same service entry
point the loop's Celery task calls, and takes its own advisory lock; apps append their loop
here. Order matters for `--once`: nodes converge first, then allocations, then health."""

LOOPS: tuple[tuple[str, str, int], ...] = (
    ("reconcile_nodes", "fleet.services.reconcile.reconcile_nodes", 10),
    ("bring_up", "fleet.services.bring_up.advance_bring_up", 30),
    ("rollouts", "fleet.services.rollouts.advance_rollouts", 30),
    ("allocation_loop", "tenants.services.allocation_loop.run_allocation_loop", 10),
    ("health_sweep", "health.services.sweep.run_health_sweep", 30),
    ("power_history", "fleet.services.power_history.record_power_history", 60),
    ("rack_power", "health.services.rack_power.run_rack_power_check", 60),
    ("bmc_power_sync", "fleet.services.power_sync.run_power_sync", 60),
)
