"""The control loops `manage.py run_loops` runs without Celery: (name, dotted path of a
zero-argument callable, interval in seconds). Each loop takes its own advisory lock."""
LOOPS: list[tuple[str, str, int]] = [
    ("allocation_loop", "tenants.services.allocation_loop.run_allocation_loop", 10),
]
