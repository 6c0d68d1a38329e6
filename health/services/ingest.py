"""Agent telemetry in: heartbeats and health reports → node fields, conditions, check results.

A heartbeat costs a fixed handful of queries whatever its GPU count: one UPDATE of the node
(which also says whether a level condition is active), and writes only when something changed.
"""
from datetime import datetime

from django.db import connection, transaction

from fleet.models import Node
from fleet.services.drive_inventory import reconcile_drive_inventory
from health.choices import CheckStatus
from health.models import Condition, HealthCheckResult
from health.policy import (
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

_gpus_per_node: dict = {}  # node id → (GPU count, SKU slowdown °C) of its type (immutable for a node's life)


class UnknownNode(Exception):
    """The token is valid but the node no longer exists."""


def _node_type_facts(node_id) -> tuple[int, int | None]:
    if node_id not in _gpus_per_node:
        row = Node.objects.filter(pk=node_id).values_list("node_type__gpus_per_node", "node_type__gpu_model").first()
        if row is None:
            raise UnknownNode(node_id)
        _gpus_per_node[node_id] = (row[0], slowdown_temp_c(row[1] or ""))
    return _gpus_per_node[node_id]


def _expected_gpus(node_id) -> int | None:
    return _node_type_facts(node_id)[0]


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


def heartbeat_signals(gpus: list[dict], expected: int | None, *, sku_slowdown_c: int | None = None,
                      ib_ports: list[dict] | None = None) -> dict:
    """The policy's heartbeat signals: {(gpu_index | None, signal): detail}."""
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
        for xid in gpu.get("xid_errors") or ():
            found[(index, f"xid_{xid}")] = f"XID {xid} on GPU {index}"
        if gpu.get("ecc_sbe"):
            found[(index, "ecc_sbe")] = f"{gpu['ecc_sbe']} single-bit ECC errors"
        if gpu.get("row_remap_pending"):
            pending = gpu["row_remap_pending"]
            found[(index, "row_remap_pending")] = ("row remap pending" if pending is True
                                                   else f"{pending} rows pending remap")
        if gpu.get("row_remap_failed"):
            found[(index, "row_remap_failed")] = "row remap failed"
        if gpu.get("nvlink_down"):
            found[(index, "nvlink_down")] = f"{gpu['nvlink_down']} NVLink link(s) down"
    if expected is not None and len(gpus) < expected:
        found[(None, "gpu_count_mismatch")] = f"{len(gpus)} of {expected} GPUs visible"
    return found


def _heartbeat_sql() -> str:
    """One round trip: the node UPDATE returns whether a level condition is still active
    (no row back: the node is gone)."""
    node_table, condition_table = Node._meta.db_table, Condition._meta.db_table
    levels = ", ".join(f"'{signal}'" for signal in sorted(HEARTBEAT_LEVEL_SIGNALS))
    return (f"UPDATE {node_table} SET last_heartbeat_at = %s, power_state = %s, observed_power_w = %s WHERE id = %s "
            f"RETURNING EXISTS(SELECT 1 FROM {condition_table} WHERE {condition_table}.node_id = {node_table}.id "
            f"AND {condition_table}.status = 'active' AND {condition_table}.signal IN ({levels}))")


_UPDATE_NODE = _heartbeat_sql()


def ingest_heartbeat(*, node_id, power_state: str, gpus: list[dict], now: datetime,
                     ib_ports: list[dict] | None = None) -> None:
    """The common case (nothing wrong, nothing to clear) is one statement of fixed SQL: it is
    the hottest path in the control plane (every node, every 10 s)."""
    expected, sku_slowdown_c = _node_type_facts(node_id)
    power = [g["power_w"] for g in gpus if g.get("power_w") is not None]
    signals = heartbeat_signals(gpus, expected, sku_slowdown_c=sku_slowdown_c, ib_ports=ib_ports)
    db_id = Node._meta.pk.get_db_prep_value(node_id, connection)
    with connection.cursor() as cursor:
        cursor.execute(_UPDATE_NODE, [connection.ops.adapt_datetimefield_value(now), power_state,
                                      round(sum(power)) if power else None, db_id])
        row = cursor.fetchone()
    if row is None:
        _gpus_per_node.pop(node_id, None)
        raise UnknownNode(node_id)
    if not signals and not row[0]:
        return
    apply_observations(observed={node_id: signals}, now=now, clear_absent={node_id: HEARTBEAT_LEVEL_SIGNALS})


@transaction.atomic
def ingest_health_report(*, node_id, observed_at: datetime, checks: list[dict], now: datetime,
                         drives: list[dict] | None = None) -> int:
    if not Node.objects.filter(pk=node_id).exists():
        raise UnknownNode(node_id)
    if drives is not None:
        reconcile_drive_inventory(node_id=node_id, drives=drives, observed_at=observed_at, now=now)
    HealthCheckResult.objects.bulk_create([
        HealthCheckResult(node_id=node_id, name=c["name"], status=c["status"], detail=c.get("detail") or "",
                          observed_at=observed_at) for c in checks])
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
