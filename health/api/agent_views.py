"""Node agent telemetry: heartbeats and health reports (docs/api.md, agent API)."""

import re
from datetime import datetime

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import (
    api_view,
    authentication_classes,
    permission_classes,
)
from rest_framework.response import Response

from core.api.authentication import AgentTokenAuthentication
from core.api.permissions import IsAgent
from core.api.problems import Problem
from core.api.schema import problems
from core.api.timestamps import parse_rfc3339
from fleet.choices import DriveInterface, PowerState
from fleet.services.drive_inventory import MAX_CAPACITY_GB, MAX_DRIVES
from health.choices import CheckName, CheckStatus
from health.policy import AGENT_CLOCK_SKEW_LIMIT
from health.services.ingest import ClockSkewed, UnknownNode, ingest_health_report, ingest_heartbeat

GPU_INT_FIELDS = (
    "index",
    "ecc_sbe",
    "ecc_dbe",
    "retired_pages",
    "nvlink_down",
    "memory_used_mb",
    "recovery_action",
    "throttle_reasons",
    "nvlink_errors_1h",
)
# NVML reports remapped rows as counts, nvidia-smi as Yes/No: accept a flag or a count.
GPU_FLAG_FIELDS = ("row_remap_pending", "row_remap_failed")
GPU_NUMBER_FIELDS = ("temperature_c", "power_w", "utilization_pct", "slowdown_temp_c")
MAX_IB_PORTS = 32
MAX_GPUS = 72
MAX_READING = 1_000_000  # far above any real temperature, wattage or percentage; keeps sums in range
MAX_COUNTER = 2**62  # cumulative energy counters (mJ, J): far above any real one, within a bigint
WALL_SOURCES = ("bmc", "pdu")
MAX_XID_EVENTS = 32  # per GPU per heartbeat; a flood beyond it is one more Xid the operator sees
MAX_REGISTER = 2**32 - 1  # Xid message fields are 32-bit registers
XID_UNIT = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")
DRIVER_VERSION = re.compile(r"^\d{1,4}(\.\d{1,4}){0,3}$")
GPU_ARCHITECTURES = ("ampere", "hopper", "blackwell")


def _invalid(errors: list[dict]) -> Problem:
    return Problem(400, "validation_error", "The body is not valid; fix the listed fields and resend.", errors=errors)


def _timestamp(value, field: str, errors: list[dict]):
    if value is None:
        return None
    try:
        parsed = parse_rfc3339(value)
    except ValueError:
        errors.append(
            {"field": field, "message": "Must be an RFC 3339 timestamp with a zone, e.g. 2026-11-02T10:00:00Z."}
        )
        return None
    return parsed


POWER_STATES = frozenset(PowerState.values)


def _gpu_errors(i: int, gpu: dict, seen: set, errors: list[dict]) -> None:
    """One GPU's checks. JSON decodes to exact builtin types, so `type(v) is int` is the
    bool-excluding integer test without a call per field (8 GPUs × 13 fields per heartbeat)."""
    for name in GPU_INT_FIELDS:
        value = gpu.get(name)
        if (name == "index" or value is not None) and not (type(value) is int and value >= 0):
            errors.append({"field": f"gpus.{i}.{name}", "message": "A non-negative integer."})
    for name in GPU_FLAG_FIELDS:
        value = gpu.get(name)
        if value is not None and not (value is True or value is False or (type(value) is int and value >= 0)):
            errors.append({"field": f"gpus.{i}.{name}", "message": "true/false or a non-negative count."})
    for name in GPU_NUMBER_FIELDS:
        value = gpu.get(name)
        if value is not None and not (
            (type(value) is int or type(value) is float) and -MAX_READING <= value <= MAX_READING
        ):
            errors.append(
                {"field": f"gpus.{i}.{name}", "message": f"A number between -{MAX_READING} and {MAX_READING}."}
            )
    energy = gpu.get("energy_mj")
    if energy is not None and not (type(energy) is int and 0 <= energy <= MAX_COUNTER):
        errors.append({"field": f"gpus.{i}.energy_mj", "message": f"A whole number of mJ from 0 to {MAX_COUNTER}."})
    xids = gpu.get("xid_errors")
    if xids is not None and not (type(xids) is list and all(type(x) is int and 0 < x < 100_000 for x in xids)):
        errors.append({"field": f"gpus.{i}.xid_errors", "message": "A list of XID numbers (positive integers)."})
    events = gpu.get("xid_events")
    if events is not None:
        _xid_event_errors(i, events, errors)
    index = gpu.get("index")
    if type(index) is int:
        if index >= MAX_GPUS:
            errors.append({"field": f"gpus.{i}.index", "message": f"A GPU index below {MAX_GPUS}."})
        if index in seen:
            errors.append({"field": f"gpus.{i}.index", "message": "Duplicate GPU index."})
        seen.add(index)


def _xid_event_errors(i: int, events, errors: list[dict]) -> None:
    """Each Xid event: its number and the fields its catalogue row decodes, every one bounded."""
    field = f"gpus.{i}.xid_events"
    if not isinstance(events, list) or len(events) > MAX_XID_EVENTS:
        errors.append({"field": field, "message": f"A list of at most {MAX_XID_EVENTS} Xid event objects."})
        return
    for j, event in enumerate(events):
        where = f"{field}.{j}"
        if not isinstance(event, dict):
            errors.append({"field": where, "message": "Each Xid event is an object."})
            continue
        unknown = set(event) - {"xid", "recovery_action", "unit", "intr_info", "error_status", "registers"}
        if unknown:
            errors.append({"field": where, "message": f"Unknown fields: {', '.join(sorted(unknown))}."})
        number = event.get("xid")
        if not (type(number) is int and 0 < number < 100_000):
            errors.append({"field": f"{where}.xid", "message": "The Xid number: an integer from 1 to 99999."})
        action = event.get("recovery_action")
        if action is not None and not (type(action) is int and 0 <= action <= 4):
            errors.append(
                {"field": f"{where}.recovery_action", "message": "Xid 154's recovery action: an integer from 0 to 4."}
            )
        unit = event.get("unit")
        if unit is not None and not (isinstance(unit, str) and XID_UNIT.match(unit)):
            errors.append({"field": f"{where}.unit", "message": "The NVLink unit name, e.g. RLW_REMAP (A-Z, 0-9, _)."})
        for name in ("intr_info", "error_status"):
            value = event.get(name)
            if value is not None and not (type(value) is int and 0 <= value <= MAX_REGISTER):
                errors.append({"field": f"{where}.{name}", "message": f"An integer from 0 to {MAX_REGISTER}."})
        registers = event.get("registers")
        if registers is not None and not (
            type(registers) is list
            and len(registers) <= 7
            and all(type(r) is int and 0 <= r <= MAX_REGISTER for r in registers)
        ):
            errors.append(
                {"field": f"{where}.registers", "message": f"Up to 7 register values, each from 0 to {MAX_REGISTER}."}
            )


def _ib_port_errors(ports, errors: list[dict]) -> None:
    if not isinstance(ports, list) or len(ports) > MAX_IB_PORTS:
        errors.append({"field": "ib_ports", "message": f"A list of at most {MAX_IB_PORTS} port objects."})
        return
    for i, port in enumerate(ports):
        if not isinstance(port, dict):
            errors.append({"field": f"ib_ports.{i}", "message": "Each port is an object."})
            continue
        for name in ("port", "state"):
            value = port.get(name)
            if not (isinstance(value, str) and 0 < len(value) <= 64 and value.isprintable()):
                errors.append({"field": f"ib_ports.{i}.{name}", "message": "1 to 64 printable characters."})
        for name in ("link_downed_1h", "symbol_errors_1h"):
            value = port.get(name)
            if value is not None and not (type(value) is int and 0 <= value <= MAX_READING):
                errors.append({"field": f"ib_ports.{i}.{name}", "message": f"An integer from 0 to {MAX_READING}."})


def _wall_power_errors(wall, errors: list[dict]) -> None:
    if not isinstance(wall, dict):
        errors.append({"field": "wall_power", "message": "An object {watts, source, energy_j}."})
        return
    watts = wall.get("watts")
    if watts is not None and not ((type(watts) is int or type(watts) is float) and 0 <= watts <= MAX_READING):
        errors.append({"field": "wall_power.watts", "message": f"A number of watts from 0 to {MAX_READING}."})
    if wall.get("source") not in WALL_SOURCES:
        errors.append({"field": "wall_power.source", "message": "Who measured it: bmc or pdu."})
    energy = wall.get("energy_j")
    if energy is not None and not (type(energy) is int and 0 <= energy <= MAX_COUNTER):
        errors.append({"field": "wall_power.energy_j", "message": f"A whole number of J from 0 to {MAX_COUNTER}."})
    if watts is None and energy is None:
        errors.append({"field": "wall_power", "message": "Give watts, energy_j or both."})


def _driver(body, errors: list[dict]) -> dict:
    driver = {}
    version = body.get("driver_version")
    if version is not None:
        if isinstance(version, str) and DRIVER_VERSION.match(version):
            driver["driver_version"] = version
        else:
            errors.append({"field": "driver_version", "message": "The driver version, e.g. 575.57.08."})
    architecture = body.get("gpu_architecture")
    if architecture is not None:
        if architecture in GPU_ARCHITECTURES:
            driver["gpu_architecture"] = architecture
        else:
            errors.append({"field": "gpu_architecture", "message": f"One of: {', '.join(GPU_ARCHITECTURES)}."})
    return driver


def _parse_heartbeat(body) -> tuple[str, list[dict], list[dict] | None, dict | None, datetime | None, dict]:
    if not isinstance(body, dict):
        raise _invalid([{"field": "body", "message": "Send a JSON object."}])
    errors: list[dict] = []
    observed_at = _timestamp(body.get("observed_at"), "observed_at", errors)
    power_state = body.get("power_state", PowerState.ON)
    if not isinstance(power_state, str) or power_state not in POWER_STATES:
        errors.append({"field": "power_state", "message": f"One of: {', '.join(PowerState.values)}."})
    gpus = body.get("gpus", [])
    if not isinstance(gpus, list) or len(gpus) > MAX_GPUS:
        errors.append({"field": "gpus", "message": f"A list of at most {MAX_GPUS} GPU objects."})
        raise _invalid(errors)
    seen: set[int] = set()
    for i, gpu in enumerate(gpus):
        if isinstance(gpu, dict):
            _gpu_errors(i, gpu, seen, errors)
        else:
            errors.append({"field": f"gpus.{i}", "message": "Each GPU is an object."})
    ib_ports = body.get("ib_ports")
    if ib_ports is not None:
        _ib_port_errors(ib_ports, errors)
    wall = body.get("wall_power")
    if wall is not None:
        _wall_power_errors(wall, errors)
    driver = _driver(body, errors)
    if errors:
        raise _invalid(errors)
    return power_state, gpus, ib_ports, wall, observed_at, driver


def _drive_errors(drives, errors: list[dict]) -> None:
    if not isinstance(drives, list) or len(drives) > MAX_DRIVES:
        errors.append({"field": "drives", "message": f"A list of at most {MAX_DRIVES} drive objects."})
        return
    seen: set[str] = set()
    for i, drive in enumerate(drives):
        if not isinstance(drive, dict):
            errors.append({"field": f"drives.{i}", "message": "Each drive is an object."})
            continue
        serial = drive.get("serial")
        if not (isinstance(serial, str) and 0 < len(serial.strip()) <= 64 and serial.isprintable()):
            errors.append(
                {"field": f"drives.{i}.serial", "message": "The drive's serial: 1 to 64 printable characters."}
            )
        elif serial in seen:
            errors.append({"field": f"drives.{i}.serial", "message": "Duplicate serial."})
        else:
            seen.add(serial)
        model = drive.get("model", "")
        if not (isinstance(model, str) and len(model) <= 100 and model.isprintable()):
            errors.append({"field": f"drives.{i}.model", "message": "At most 100 printable characters."})
        size = drive.get("capacity_gb", 0)
        if not (type(size) is int and 0 <= size <= MAX_CAPACITY_GB):
            errors.append({"field": f"drives.{i}.capacity_gb", "message": f"An integer from 0 to {MAX_CAPACITY_GB}."})
        for flag in ("self_encrypting", "purge_supported"):
            if drive.get(flag) not in (None, True, False):
                errors.append({"field": f"drives.{i}.{flag}", "message": "true or false."})
        if drive.get("interface") not in (None, *DriveInterface.values):
            errors.append({"field": f"drives.{i}.interface", "message": f"One of: {', '.join(DriveInterface.values)}."})


def _parse_report(body) -> tuple[datetime | None, list[dict], list[dict] | None]:
    if not isinstance(body, dict):
        raise _invalid([{"field": "body", "message": "Send a JSON object."}])
    errors: list[dict] = []
    observed_at = _timestamp(body.get("observed_at"), "observed_at", errors)
    drives = body.get("drives")
    if drives is not None:
        _drive_errors(drives, errors)
    checks = body.get("checks", [] if drives is not None else None)
    # A report carries checks, a drive inventory, or both.
    if not isinstance(checks, list) or len(checks) > 50 or (not checks and drives is None):
        errors.append(
            {
                "field": "checks",
                "message": "A list of up to 50 check objects (at least one unless the report carries `drives`).",
            }
        )
        raise _invalid(errors)
    for i, check in enumerate(checks):
        if not isinstance(check, dict):
            errors.append({"field": f"checks.{i}", "message": "Each check is an object."})
            continue
        if check.get("name") not in CheckName.values:
            errors.append({"field": f"checks.{i}.name", "message": f"One of: {', '.join(CheckName.values)}."})
        if check.get("status") not in CheckStatus.values:
            errors.append({"field": f"checks.{i}.status", "message": "One of: pass, warn, fail."})
        if check.get("detail") is not None and not isinstance(check["detail"], str):
            errors.append({"field": f"checks.{i}.detail", "message": "A string."})
    if errors:
        raise _invalid(errors)
    return observed_at, checks, drives


class XidEventSchema(serializers.Serializer):
    """One Xid with the fields its catalogue row decodes (docs/health-policy.md)."""

    xid = serializers.IntegerField(min_value=1, max_value=99_999)
    recovery_action = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=4,
        help_text="Xid 154: 0 None, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset",
    )
    unit = serializers.CharField(
        required=False, max_length=32, help_text="Xid 144-150: the NVLink unit, e.g. RLW_REMAP"
    )
    intr_info = serializers.IntegerField(required=False, min_value=0, max_value=MAX_REGISTER)
    error_status = serializers.IntegerField(required=False, min_value=0, max_value=MAX_REGISTER)
    registers = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=MAX_REGISTER),
        required=False,
        max_length=7,
        help_text="Xid 74: the seven NVLink error registers",
    )


class GpuTelemetrySchema(serializers.Serializer):
    """One GPU in a heartbeat (docs/api.md). `xid_errors` are the XIDs seen since the previous heartbeat."""

    index = serializers.IntegerField(min_value=0)
    uuid = serializers.CharField(required=False)
    temperature_c = serializers.FloatField(required=False, allow_null=True)
    power_w = serializers.FloatField(required=False, allow_null=True)
    utilization_pct = serializers.FloatField(required=False, allow_null=True)
    memory_used_mb = serializers.IntegerField(required=False, allow_null=True)
    ecc_sbe = serializers.IntegerField(required=False, allow_null=True)
    ecc_dbe = serializers.IntegerField(required=False, allow_null=True)
    retired_pages = serializers.IntegerField(required=False, allow_null=True)
    row_remap_pending = serializers.JSONField(required=False, help_text="true/false or a count")
    row_remap_failed = serializers.JSONField(required=False, help_text="true/false or a count")
    xid_errors = serializers.ListField(child=serializers.IntegerField(), required=False)
    xid_events = XidEventSchema(many=True, required=False)
    nvlink_down = serializers.IntegerField(required=False, allow_null=True)
    recovery_action = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="NVML GPU recovery action: 0 none, 1 GPU reset, 2 node reboot, "
        "3 drain P2P, 4 drain and reset, 5 recover IMEX domain, "
        "6 bus reset, 7 system reboot",
    )
    throttle_reasons = serializers.IntegerField(required=False, allow_null=True, help_text="NVML clock event bitmask")
    slowdown_temp_c = serializers.FloatField(required=False, allow_null=True, help_text="the GPU's slowdown threshold")
    nvlink_errors_1h = serializers.IntegerField(
        required=False, allow_null=True, help_text="NVLink replay+recovery+CRC errors over the last hour"
    )
    energy_mj = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_COUNTER,
        help_text="NVML total energy consumption since the driver loaded (mJ, cumulative)",
    )


class IbPortSchema(serializers.Serializer):
    port = serializers.CharField(max_length=64, help_text="e.g. mlx5_0/1")
    state = serializers.CharField(max_length=64, help_text="e.g. 4: ACTIVE")
    link_downed_1h = serializers.IntegerField(required=False, help_text="LinkDownedCounter increase, last hour")
    symbol_errors_1h = serializers.IntegerField(required=False, help_text="SymbolErrorCounter increase, last hour")


class WallPowerSchema(serializers.Serializer):
    """The node's wall draw as a meter reports it (optional): the BMC's chassis power
    (Redfish PowerControl[].PowerConsumedWatts) or a metered PDU outlet."""

    watts = serializers.FloatField(required=False, min_value=0, max_value=MAX_READING)
    source = serializers.ChoiceField(choices=WALL_SOURCES)
    energy_j = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_COUNTER,
        help_text="the meter's cumulative energy counter (J); the agent integrates "
        "the meter's power into one when the BMC keeps none",
    )


class HeartbeatSchema(serializers.Serializer):
    observed_at = serializers.DateTimeField()
    power_state = serializers.ChoiceField(choices=PowerState.choices)
    agent_version = serializers.CharField(required=False)
    gpus = GpuTelemetrySchema(many=True)
    ib_ports = IbPortSchema(many=True, required=False)
    wall_power = WallPowerSchema(required=False)


class CheckSchema(serializers.Serializer):
    name = serializers.ChoiceField(choices=CheckName.choices)
    status = serializers.ChoiceField(choices=CheckStatus.choices)
    detail = serializers.CharField(required=False, allow_blank=True)


class DriveInventorySchema(serializers.Serializer):
    """One drive the agent sees (NVMe identify data)."""

    serial = serializers.CharField(max_length=64)
    model = serializers.CharField(max_length=100, required=False)
    capacity_gb = serializers.IntegerField(min_value=0, max_value=MAX_CAPACITY_GB, required=False)
    interface = serializers.ChoiceField(choices=DriveInterface.choices, required=False)
    self_encrypting = serializers.BooleanField(required=False, help_text="encrypts all user data (crypto erase)")
    purge_supported = serializers.BooleanField(required=False, help_text="NVMe sanitize or crypto erase available")


class HealthReportSchema(serializers.Serializer):
    observed_at = serializers.DateTimeField()
    checks = CheckSchema(many=True, required=False)
    drives = DriveInventorySchema(
        many=True, required=False, help_text="every drive the agent sees; reconciled with the node's drive records"
    )


AGENT_ERRORS = problems(400, 401, 403, 404, 415)
REPORT_ERRORS = problems(400, 401, 403, 404, 415, 422)


def _unknown_node() -> Problem:
    return Problem(404, "not_found", "This agent's node is not registered any more; re-enrol the node.")


@extend_schema(
    operation_id="agent_heartbeat",
    request=HeartbeatSchema,
    responses={202: OpenApiResponse(description="accepted"), **AGENT_ERRORS},
)
@api_view(["POST"])
@authentication_classes([AgentTokenAuthentication])
@permission_classes([IsAgent])
def heartbeat(request):
    power_state, gpus, ib_ports, wall, observed_at, driver = _parse_heartbeat(request.data)
    try:
        ingest_heartbeat(
            driver=driver,
            node_id=request.user.node_id,
            power_state=power_state,
            gpus=gpus,
            now=timezone.now(),
            ib_ports=ib_ports,
            wall_power=wall,
            observed_at=observed_at,
        )
    except UnknownNode:
        raise _unknown_node() from None
    return Response(status=202)


@extend_schema(
    operation_id="agent_health_reports",
    request=HealthReportSchema,
    responses={202: OpenApiResponse(description="accepted"), **REPORT_ERRORS},
)
@api_view(["POST"])
@authentication_classes([AgentTokenAuthentication])
@permission_classes([IsAgent])
def health_reports(request):
    observed_at, checks, drives = _parse_report(request.data)
    now = timezone.now()
    try:
        ingest_health_report(
            node_id=request.user.node_id,
            observed_at=observed_at or now,
            checks=checks,
            now=now,
            drives=drives,
            identity_issued_at=request.user.extra.get("issued_at"),
        )
    except UnknownNode:
        raise _unknown_node() from None
    except ClockSkewed as exc:
        limit = int(AGENT_CLOCK_SKEW_LIMIT.total_seconds())
        raise Problem(
            422,
            "clock_skew",
            f"observed_at is {exc.skew_seconds:+d} s from the server's clock (allowed ±{limit} s); the "
            "report was kept but not counted. Fix the node's time sync (NTP/PTP) and run the checks again.",
            errors=[{"field": "observed_at", "message": f"{exc.skew_seconds:+d} s from server time"}],
        ) from None
    return Response(status=202)
