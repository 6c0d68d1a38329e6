"""What `make demo` seeds, in order. Each step is `callable(stdout) -> None`, idempotent, and
is imported lazily so an app adds its own step here without touching the command."""

DEMO_SEED_STEPS: tuple[str, ...] = (
    "devtools.services.fleet_seed.seed_demo_fleet",
    "devtools.services.demo_software.seed_demo_software",
    "devtools.services.demo_bring_up.seed_demo_bring_up",
    "fleet.services.snapshots.seed_demo_history",
    "planning.services.migration_plans.seed_demo_plan",
    "devtools.services.demo_users.ensure_demo_operator",
    "devtools.services.demo_tenants.seed_demo_tenant",
    "devtools.services.demo_billing.seed_demo_billing",
    "devtools.services.demo_bmc.wire_demo_bmcs",
    "devtools.services.demo_notifications.seed_demo_notifications",
)

# A node of a new rack, enrolled without its InfiniBand stack: the bring-up ladder holds it at
# the network step and says why (devtools.services.demo_bring_up; the simulator leaves it out).
DEMO_NEW_NODE = "dc1-gpu00257"
DEMO_NEW_NODE_MISSING = "ib_stack"

# Processes `make demo` keeps running: (label, argv after the venv's python).
DEMO_PROCESSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The demo's BMCs: one emulated Redfish system per node (devtools.services.demo_bmc).
    (
        "redfish emulator",
        ("-m", "devtools.redfish_emulator", "--port", "8001", "--systems-file", "{var}/demo-redfish-systems.txt"),
    ),
    # Stands in for PagerDuty and the tenants' receivers (devtools.services.demo_notifications).
    (
        "notification sink",
        ("-m", "devtools.notification_sink", "--port", "8002", "--log", "{var}/demo-notifications.log"),
    ),
    ("web", ("manage.py", "runserver", "127.0.0.1:8000", "--noreload")),
    ("worker+beat", ("-m", "celery", "-A", "config", "worker", "-B", "--concurrency", "2", "--loglevel", "WARNING")),
    (
        "fleet simulator",
        (
            "manage.py",
            "simulate_fleet",
            "--url",
            "http://127.0.0.1:8000",
            "--missing-software",
            f"{DEMO_NEW_NODE}:{DEMO_NEW_NODE_MISSING}",
        ),
    ),
)

DEMO_OPERATOR = ("operator", "hangar-demo")


def demo_processes(simulator_speed: float | None = None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """DEMO_PROCESSES, with the fleet simulator at `simulator_speed` when given (`make demo`
    reads HANGAR_DEMO_SPEED): durations and faults compressed, the clock still the wall clock,
    so the accelerated demo still meters and bills (docs/agent.md)."""
    if not simulator_speed:
        return DEMO_PROCESSES
    if not 0 < simulator_speed <= 3600:
        raise ValueError(f"the simulator's speed must be within 0..3600, got {simulator_speed}")
    return tuple(
        (label, (*argv, "--speed", f"{simulator_speed:g}") if label == "fleet simulator" else argv)
        for label, argv in DEMO_PROCESSES
    )
