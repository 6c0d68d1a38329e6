"""Node agent telemetry: heartbeats and health reports (API.md, agent API)."""
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
from fleet.choices import PowerState
from health.choices import CheckName, CheckStatus
from health.services.ingest import UnknownNode, ingest_health_report, ingest_heartbeat

GPU_INT_FIELDS = ("index", "ecc_sbe", "ecc_dbe", "retired_pages", "nvlink_down", "memory_used_mb")
# NVML reports remapped rows as counts, nvidia-smi as Yes/No: accept a flag or a count.
GPU_FLAG_FIELDS = ("row_remap_pending", "row_remap_failed")
GPU_NUMBER_FIELDS = ("temperature_c", "power_w", "utilization_pct")
MAX_GPUS = 72
MAX_READING = 1_000_000  # far above any real temperature, wattage or percentage; keeps sums in range


def _invalid(errors: list[dict]) -> Problem:
    return Problem(400, "validation_error", "The body is not valid; fix the listed fields and resend.", errors=errors)


def _timestamp(value, field: str, errors: list[dict]):
    if value is None:
        return None
    try:
        parsed = parse_rfc3339(value)
    except ValueError:
        errors.append({"field": field, "message": "Must be an RFC 3339 timestamp with a zone, e.g. 2026-11-02T10:00:00Z."})
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
        if value is not None and not ((type(value) is int or type(value) is float) and -MAX_READING <= value <= MAX_READING):
            errors.append({"field": f"gpus.{i}.{name}", "message": f"A number between -{MAX_READING} and {MAX_READING}."})
    xids = gpu.get("xid_errors")
    if xids is not None and not (type(xids) is list and all(type(x) is int and 0 < x < 100_000 for x in xids)):
        errors.append({"field": f"gpus.{i}.xid_errors", "message": "A list of XID numbers (positive integers)."})
    index = gpu.get("index")
    if type(index) is int:
        if index >= MAX_GPUS:
            errors.append({"field": f"gpus.{i}.index", "message": f"A GPU index below {MAX_GPUS}."})
        if index in seen:
            errors.append({"field": f"gpus.{i}.index", "message": "Duplicate GPU index."})
        seen.add(index)


def _parse_heartbeat(body) -> tuple[str, list[dict]]:
    if not isinstance(body, dict):
        raise _invalid([{"field": "body", "message": "Send a JSON object."}])
    errors: list[dict] = []
    _timestamp(body.get("observed_at"), "observed_at", errors)
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
    if errors:
        raise _invalid(errors)
    return power_state, gpus


def _parse_report(body) -> tuple[datetime | None, list[dict]]:
    if not isinstance(body, dict):
        raise _invalid([{"field": "body", "message": "Send a JSON object."}])
    errors: list[dict] = []
    observed_at = _timestamp(body.get("observed_at"), "observed_at", errors)
    checks = body.get("checks")
    if not isinstance(checks, list) or not checks or len(checks) > 50:
        errors.append({"field": "checks", "message": "A list of 1 to 50 check objects."})
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
    return observed_at, checks


class GpuTelemetrySchema(serializers.Serializer):
    """One GPU in a heartbeat (API.md). `xid_errors` are the XIDs seen since the previous heartbeat."""

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
    nvlink_down = serializers.IntegerField(required=False, allow_null=True)


class HeartbeatSchema(serializers.Serializer):
    observed_at = serializers.DateTimeField()
    power_state = serializers.ChoiceField(choices=PowerState.choices)
    agent_version = serializers.CharField(required=False)
    gpus = GpuTelemetrySchema(many=True)


class CheckSchema(serializers.Serializer):
    name = serializers.ChoiceField(choices=CheckName.choices)
    status = serializers.ChoiceField(choices=CheckStatus.choices)
    detail = serializers.CharField(required=False, allow_blank=True)


class HealthReportSchema(serializers.Serializer):
    observed_at = serializers.DateTimeField()
    checks = CheckSchema(many=True)


AGENT_ERRORS = problems(400, 401, 403, 404, 415)


def _unknown_node() -> Problem:
    return Problem(404, "not_found", "This agent's node is not registered any more; re-enrol the node.")


@extend_schema(operation_id="agent_heartbeat", request=HeartbeatSchema,
               responses={202: OpenApiResponse(description="accepted"), **AGENT_ERRORS})
@api_view(["POST"])
@authentication_classes([AgentTokenAuthentication])
@permission_classes([IsAgent])
def heartbeat(request):
    power_state, gpus = _parse_heartbeat(request.data)
    try:
        ingest_heartbeat(node_id=request.user.node_id, power_state=power_state, gpus=gpus, now=timezone.now())
    except UnknownNode:
        raise _unknown_node() from None
    return Response(status=202)


@extend_schema(operation_id="agent_health_reports", request=HealthReportSchema,
               responses={202: OpenApiResponse(description="accepted"), **AGENT_ERRORS})
@api_view(["POST"])
@authentication_classes([AgentTokenAuthentication])
@permission_classes([IsAgent])
def health_reports(request):
    observed_at, checks = _parse_report(request.data)
    now = timezone.now()
    try:
        ingest_health_report(node_id=request.user.node_id, observed_at=observed_at or now, checks=checks, now=now)
    except UnknownNode:
        raise _unknown_node() from None
    return Response(status=202)
