"""Control loops that `manage.py run_loops` drives on a machine without Celery: (name, dotted
callable taking no arguments, interval in seconds). Each callable is the same service entry
point the loop's Celery task calls; apps append their loop here."""

LOOPS: tuple[tuple[str, str, int], ...] = (
    ("reconcile_nodes", "fleet.services.reconcile.reconcile_nodes", 10),
    ("health_sweep", "health.services.sweep.run_health_sweep", 30),
)
