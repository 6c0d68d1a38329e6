"""Agent telemetry in: heartbeats and health reports → node fields, conditions, check results.

A heartbeat costs a fixed handful of queries whatever its GPU count: one UPDATE of the node
(which also says whether a level condition is active, and keeps the GPUs' last figures for the
node page), and writes only when something changed.
"""

import logging
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import connection, transaction

from fleet.choices import Health
from fleet.models import Node, NodeEnergyCounter
from fleet.services.drive_inventory import reconcile_drive_inventory
from fleet.services.energy import INTEGRATE_EVERY, as_datetime, record_counters
from fleet.wall_power import host_share_kw
from health import xid
from health.choices import CheckStatus
from health.models import Condition, HealthCheckResult
from health.policy import (
    AGENT_CLOCK_SKEW_LIMIT,
    CHECK_FAIL_SIGNAL,
    CHECK_PASS_CLEARS,
    CHECK_WARN_SIGNAL,
    HEARTBEAT_LEVEL_SIGNALS,
    IB_LINK_DOWNED_REPAIR,
    IB_SYMBOL_ERRORS_WARN,
    NVLINK_ERRORS_WARN,
    RECOVERY_ACTIONS,
    THROTTLE_THERMAL_BITS,
    slowdown_temp_c,
)
from health.services.conditions import apply_observations
from health.services.incidents import confirm_from_node_evidence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _NodeShape:
    gpus: int
    node_kw: Decimal  # the type's rated maximum: no reading above it is believed
    host_kw: Decimal | None
    slowdown_c: int | None  # the SKU's GPU slowdown temperature (thermal policy)
    family: str = ""  # the Xid catalogue column its GPUs read (health.xid.family)


_node_shapes: dict = {}  # node id → its type's figures (immutable for a node's life)


class UnknownNode(Exception):
    """The token is valid but the node no longer exists."""


class ClockSkewed(Exception):
    """The agent's timestamp is too far from the server's clock; the report was kept, not counted."""

    def __init__(self, skew_seconds: int):
        super().__init__(skew_seconds)
        self.skew_seconds = skew_seconds


# A clock years off is reported as this many seconds at most: the column is a 32-bit integer on
# PostgreSQL, and "ten years off" says all an operator needs to know.
SKEW_REPORTED_LIMIT_S = 10 * 365 * 24 * 3600


def clock_skew_seconds(observed_at: datetime | None, now: datetime) -> int | None:
    """The agent's clock minus the server's (positive: the agent runs ahead), within ±10 years."""
    if observed_at is None:
        return None
    skew = round((observed_at - now).total_seconds())
    return max(-SKEW_REPORTED_LIMIT_S, min(SKEW_REPORTED_LIMIT_S, skew))


def _shape(node_id) -> _NodeShape:
    if node_id not in _node_shapes:
        row = (
            Node.objects.filter(pk=node_id)
            .values_list("node_type__gpus_per_node", "node_type__node_kw", "node_type__gpu_model")
            .first()
        )
        if row is None:
            raise UnknownNode(node_id)
        _node_shapes[node_id] = _NodeShape(
            gpus=row[0],
            node_kw=row[1],
            host_kw=host_share_kw().get(row[2]),
            slowdown_c=slowdown_temp_c(row[2] or ""),
            family=xid.family(row[2] or ""),
        )
    return _node_shapes[node_id]


def _thermal(gpu: dict, sku_slowdown_c: int | None) -> str | None:
    """Why the GPU is in thermal slowdown now (throttle reasons first, then temperature against its
    own slowdown threshold, else the SKU's), or None."""
    reasons = gpu.get("throttle_reasons")
    if reasons and reasons & THROTTLE_THERMAL_BITS:
        return f"thermal throttle reason 0x{reasons:x}"
    temperature = gpu.get("temperature_c")
    threshold = gpu.get("slowdown_temp_c") or sku_slowdown_c
    if temperature is not None and threshold is not None and temperature >= threshold:
        return f"{temperature} °C ≥ slowdown {threshold} °C"
    return None


def xid_events(gpu: dict) -> dict[int, dict]:
    """{xid: decoded fields} for one GPU: `xid_events` (with fields) and bare `xid_errors`."""
    events: dict[int, dict] = {}
    for event in gpu.get("xid_events") or ():
        events.setdefault(event["xid"], {}).update({k: v for k, v in event.items() if k != "xid"})
    for number in gpu.get("xid_errors") or ():
        events.setdefault(number, {})
    return events


def _fields_text(fields: dict) -> str:
    parts = []
    if fields.get("recovery_action") is not None:
        value = fields["recovery_action"]
        parts.append(f"recovery action {value} ({xid.RECOVERY_ACTION_NAMES.get(value, 'unknown')})")
    if fields.get("unit"):
        parts.append(f"unit {fields['unit']}")
    for name in ("intr_info", "error_status"):
        if fields.get(name) is not None:
            parts.append(f"{name} 0x{fields[name]:x}")
    if fields.get("registers"):
        parts.append("registers " + " ".join(f"0x{r:08x}" for r in fields["registers"]))
    return "; ".join(parts)


def heartbeat_signals(
    gpus: list[dict],
    expected: int | None,
    *,
    sku_slowdown_c: int | None = None,
    ib_ports: list[dict] | None = None,
    gpu_family: str = "",
) -> dict:
    """The policy's heartbeat signals: {(gpu_index | None, signal): detail}; an Xid's detail is a
    (detail, severity) pair decided from its fields by the catalogue (health.xid)."""
    found: dict = {}
    for port in ib_ports or ():
        name = port.get("port", "?")
        if port.get("state") and port["state"].upper() not in ("ACTIVE", "4: ACTIVE"):
            found[(None, "ib_port_down")] = f"{name}: {port['state']}"
        if (port.get("link_downed_1h") or 0) >= IB_LINK_DOWNED_REPAIR:
            found[(None, "ib_link_flapping")] = f"{name}: down {port['link_downed_1h']} times in the last hour"
        if (port.get("symbol_errors_1h") or 0) >= IB_SYMBOL_ERRORS_WARN:
            found[(None, "ib_symbol_errors")] = f"{name}: {port['symbol_errors_1h']} symbol errors in the last hour"
    for gpu in gpus:
        index = gpu["index"]
        action = gpu.get("recovery_action")
        if action:  # 0 is "none"
            name, severity, what = RECOVERY_ACTIONS.get(action, ("node_reboot", None, "unknown recovery action"))
            found[(index, f"recovery_{name}")] = f"NVML recovery action {action} on GPU {index}: {what}"
        thermal = _thermal(gpu, sku_slowdown_c)
        if thermal:
            found[(index, "thermal_slowdown")] = thermal
        if (gpu.get("nvlink_errors_1h") or 0) >= NVLINK_ERRORS_WARN:
            found[(index, "nvlink_errors")] = f"{gpu['nvlink_errors_1h']} NVLink errors in the last hour"
        events = xid_events(gpu)
        for number, decision in xid.decide_gpu(events, gpu_family=gpu_family).items():
            fields = _fields_text(events[number])
            text = decision.text(index) + (f"; {fields}" if fields else "")
            found[(index, f"xid_{number}")] = (text, decision.severity)
        if gpu.get("ecc_sbe"):
            found[(index, "ecc_sbe")] = f"{gpu['ecc_sbe']} single-bit ECC errors"
        if gpu.get("row_remap_pending"):
            pending = gpu["row_remap_pending"]
            found[(index, "row_remap_pending")] = (
                "row remap pending" if pending is True else f"{pending} rows pending remap"
            )
        if gpu.get("row_remap_failed"):
            found[(index, "row_remap_failed")] = "row remap failed"
        if gpu.get("nvlink_down"):
            found[(index, "nvlink_down")] = f"{gpu['nvlink_down']} NVLink link(s) down"
    if expected is not None and len(gpus) < expected:
        found[(None, "gpu_count_mismatch")] = f"{len(gpus)} of {expected} GPUs visible"
    return found


def _heartbeat_sql(*, async_commit: bool = False) -> str:
    """One round trip: the node UPDATE returns whether a level condition is still active
    (no row back: the node is gone).

    `async_commit` (PostgreSQL, a heartbeat committed on its own) sets `synchronous_commit` off
    for this statement's own transaction only (`set_config(…, true)` in a one-row FROM): its
    commit returns without waiting for the WAL flush, which was most of the statement's time
    (2–4 ms p50 here, more under write load, against ~0.2 ms without). What a database crash can
    lose is the last ~0.6 s of heartbeats (3 × wal_writer_delay), which the next ones, every
    10 s, write again; the database stays consistent, and every other write (meter events,
    transitions, audit) keeps its synchronous commit.

    A good heartbeat (no signal in it) on an `unknown` node with no active condition makes it
    `healthy` in the same statement: the lease lapse is over the moment the node speaks, and
    waiting up to a sweep interval for the roll-up showed healthy nodes flapping to `unknown`
    on the dashboard. The probe runs only for `unknown` nodes (the CASE short-circuits)."""
    node_table, condition_table = Node._meta.db_table, Condition._meta.db_table
    levels = ", ".join(f"'{signal}'" for signal in sorted(HEARTBEAT_LEVEL_SIGNALS))
    counter_table = NodeEnergyCounter._meta.db_table
    unknown, healthy = Health.UNKNOWN.value, Health.HEALTHY.value
    async_from = " FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit" if async_commit else ""
    return (
        f"UPDATE {node_table} SET last_heartbeat_at = %s, power_state = %s, gpu_power_w = %s, "
        f"gpu_telemetry = COALESCE(%s, gpu_telemetry), "
        f"health = CASE WHEN health = '{unknown}' AND %s THEN (CASE WHEN EXISTS(SELECT 1 FROM {condition_table} "
        f"WHERE {condition_table}.node_id = {node_table}.id AND {condition_table}.status = 'active') "
        f"THEN health ELSE '{healthy}' END) ELSE health END, "
        f"agent_clock_skew_s = COALESCE(%s, agent_clock_skew_s), "
        f"wall_power_w = CASE WHEN %s THEN %s ELSE wall_power_w END, "
        f"wall_power_source = CASE WHEN %s THEN %s ELSE wall_power_source END, "
        f"wall_power_at = CASE WHEN %s THEN %s ELSE wall_power_at END{async_from} WHERE id = %s "
        f"RETURNING EXISTS(SELECT 1 FROM {condition_table} WHERE {condition_table}.node_id = {node_table}.id "
        f"AND {condition_table}.status = 'active' AND {condition_table}.signal IN ({levels})), "
        f"(SELECT read_at FROM {counter_table} WHERE {counter_table}.node_id = {node_table}.id)"
    )


_UPDATE_NODE = _heartbeat_sql()
_UPDATE_NODE_ASYNC_COMMIT = _heartbeat_sql(async_commit=True)

# What the node page shows of each GPU's last report; the rest of a heartbeat is judged, not kept.
TELEMETRY_FIELDS = (
    "temperature_c",
    "power_w",
    "xid_errors",
    "ecc_sbe",
    "ecc_dbe",
    "retired_pages",
    "row_remap_pending",
    "row_remap_failed",
)
TELEMETRY_XIDS_KEPT = 16
_TELEMETRY_FIELD = Node._meta.get_field("gpu_telemetry")


def _telemetry(gpus: list[dict], now: datetime, driver: dict | None = None):
    """The per-GPU figures kept on the node row (its own UPDATE writes them: no extra statement),
    as the column's database value; None when the heartbeat listed no GPUs, which keeps the last
    report (with its own time) rather than blanking it."""
    if not gpus:
        return None
    rows = []
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        row = {"index": gpu["index"], **{k: gpu[k] for k in TELEMETRY_FIELDS if gpu.get(k) is not None}}
        numbers = list(xid_events(gpu))
        if numbers:
            row["xid_errors"] = numbers
        if "xid_errors" in row:  # distinct and bounded: a flood of XIDs must not grow the node row
            row["xid_errors"] = sorted(set(row["xid_errors"]))[:TELEMETRY_XIDS_KEPT]
        rows.append(row)
    value = {"at": now.isoformat(), "gpus": rows, **(driver or {})}
    return _TELEMETRY_FIELD.get_db_prep_value(value, connection)


def _believable_wall_watts(node_id, wall_power: dict | None, shape: _NodeShape) -> int | None:
    """The meter's wall reading in W, or None; one above the type's rated maximum is refused and logged."""
    if not wall_power or wall_power.get("watts") is None:
        return None
    watts = round(wall_power["watts"])
    if watts > shape.node_kw * 1000:
        log.warning(
            "wall power reading refused on node %s: %s W from %s is above the type's %s kW maximum",
            node_id,
            watts,
            wall_power.get("source"),
            shape.node_kw,
        )
        return None
    return watts


def _counter_due(read_at, now: datetime) -> bool:
    return read_at is None or now - as_datetime(read_at, now.tzinfo) >= INTEGRATE_EVERY


def ingest_heartbeat(
    *,
    node_id,
    power_state: str,
    gpus: list[dict],
    now: datetime,
    ib_ports: list[dict] | None = None,
    wall_power: dict | None = None,
    observed_at: datetime | None = None,
    driver: dict | None = None,
) -> None:
    """The common case (nothing wrong, nothing to clear, counters integrated under a minute ago)
    is one statement of fixed SQL: it is the hottest path in the control plane (every node, every 10 s).
    The server's `now` is what the lease reads; the agent's `observed_at` only measures its clock skew."""
    shape = _shape(node_id)
    power = [g["power_w"] for g in gpus if g.get("power_w") is not None]
    signals = heartbeat_signals(
        gpus,
        shape.gpus,
        sku_slowdown_c=shape.slowdown_c,
        ib_ports=ib_ports,
        gpu_family=shape.family or xid.ARCHITECTURE_FAMILY.get((driver or {}).get("gpu_architecture", ""), ""),
    )
    wall_watts = _believable_wall_watts(node_id, wall_power, shape)
    has_wall = wall_watts is not None
    db_id = Node._meta.pk.get_db_prep_value(node_id, connection)
    at = connection.ops.adapt_datetimefield_value(now)
    # Inside a caller's transaction the statement would turn that transaction's commit
    # asynchronous too: only a heartbeat committed on its own skips the flush.
    on_its_own = connection.vendor == "postgresql" and not connection.in_atomic_block
    with connection.cursor() as cursor:
        cursor.execute(
            _UPDATE_NODE_ASYNC_COMMIT if on_its_own else _UPDATE_NODE,
            [
                at,
                power_state,
                round(sum(power)) if power else None,
                _telemetry(gpus, now, driver),
                not signals,
                clock_skew_seconds(observed_at, now),
                has_wall,
                wall_watts,
                has_wall,
                wall_power["source"] if has_wall else "",
                has_wall,
                at,
                db_id,
            ],
        )
        row = cursor.fetchone()
    if row is None:
        _node_shapes.pop(node_id, None)
        raise UnknownNode(node_id)
    gpu_counters = {g["index"]: g["energy_mj"] for g in gpus if g.get("energy_mj") is not None}
    wall_counter = (wall_power or {}).get("energy_j")
    if (gpu_counters or wall_counter is not None) and _counter_due(row[1], now):
        record_counters(
            node_id=node_id,
            now=now,
            node_kw=shape.node_kw,
            host_kw=shape.host_kw,
            wall_energy_j=wall_counter,
            wall_source=(wall_power or {}).get("source", ""),
            gpu_energy_mj=gpu_counters,
        )
    if not signals and not row[0]:
        return
    apply_observations(observed={node_id: signals}, now=now, clear_absent={node_id: HEARTBEAT_LEVEL_SIGNALS})


def ingest_health_report(
    *,
    node_id,
    observed_at: datetime,
    checks: list[dict],
    now: datetime,
    drives: list[dict] | None = None,
    identity_issued_at: datetime | None = None,
) -> int:
    """Store the results (and the drive inventory) and apply them. A report stamped outside
    ±AGENT_CLOCK_SKEW_LIMIT of its receipt is kept for inspection, marked `clock_skew`, and
    changes nothing, its drive inventory included (ClockSkewed). `identity_issued_at`: when the
    reporting agent's token was issued; a failed check from an identity newer than an
    unconfirmed incident of the node confirms it (health.services.incidents)."""
    skew = clock_skew_seconds(observed_at, now)
    if abs(skew) > AGENT_CLOCK_SKEW_LIMIT.total_seconds():
        with transaction.atomic():
            if not Node.objects.filter(pk=node_id).update(agent_clock_skew_s=skew):
                raise UnknownNode(node_id)
            HealthCheckResult.objects.bulk_create(
                [
                    HealthCheckResult(
                        node_id=node_id,
                        name=c["name"],
                        status=c["status"],
                        refused="clock_skew",
                        detail=(c.get("detail") or "")[:2000],
                        observed_at=observed_at,
                    )
                    for c in checks
                ]
            )
        raise ClockSkewed(skew)
    applied = _apply_report(node_id=node_id, observed_at=observed_at, checks=checks, now=now, drives=drives)
    failed = [c["name"] for c in checks if c["status"] == CheckStatus.FAIL]
    if failed and identity_issued_at is not None:
        confirm_from_node_evidence(
            node_id=node_id, identity_issued_at=identity_issued_at, evidence=f"{', '.join(failed)} failed", now=now
        )
    return applied


@transaction.atomic
def _apply_report(
    *, node_id, observed_at: datetime, checks: list[dict], now: datetime, drives: list[dict] | None = None
) -> int:
    if drives is not None:
        try:  # it locks the node's row first, which is also the existence check
            reconcile_drive_inventory(node_id=node_id, drives=drives, observed_at=observed_at, now=now)
        except Node.DoesNotExist:
            raise UnknownNode(node_id) from None
    elif not Node.objects.filter(pk=node_id).exists():
        raise UnknownNode(node_id)
    HealthCheckResult.objects.bulk_create(
        [
            HealthCheckResult(
                node_id=node_id,
                name=c["name"],
                status=c["status"],
                detail=c.get("detail") or "",
                observed_at=observed_at,
            )
            for c in checks
        ]
    )
    observed: dict = {}
    clears: set[str] = set()
    for check in checks:
        name, status, detail = check["name"], check["status"], (check.get("detail") or "")[:200]
        if status == CheckStatus.FAIL:
            observed[(None, CHECK_FAIL_SIGNAL[name])] = f"{name} failed: {detail}".strip(": ")
        elif status == CheckStatus.WARN and name in CHECK_WARN_SIGNAL:
            observed[(None, CHECK_WARN_SIGNAL[name])] = f"{name} warned: {detail}".strip(": ")
        elif status == CheckStatus.PASS:
            clears.update(CHECK_PASS_CLEARS[name])
    return apply_observations(observed={node_id: observed}, now=now, clear_absent={node_id: frozenset(clears)})
