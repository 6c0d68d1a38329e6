"""Control loops `manage.py run_loops` runs (name, dotted callable taking no arguments)."""
LOOPS: tuple[tuple[str, str], ...] = (
    ("health_sweep", "health.services.sweep.run_health_sweep"),
)
