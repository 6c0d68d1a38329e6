"""Fleet API shapes (docs/api.md: node agent API and operator API)."""

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone
from rest_framework import serializers

from core.validators import validate_display_text
from fleet.choices import (
    AgentActionState,
    ComponentState,
    CustodyDestination,
    CustodyKind,
    PowerAction,
    SanitizationMethod,
)
from fleet.models import NodeEvent
from fleet.models.software import COMPONENT_NAME_RE, baseline_version_errors
from fleet.services import sanitization
from fleet.services.software_inventory import MAX_COMPONENTS

# A report stamped further ahead than this would shadow every later one (older reports are
# ignored as replays), so it is refused: the node's clock needs fixing first.
MAX_FUTURE_SKEW = timedelta(minutes=5)


class ActionResultIn(serializers.Serializer):
    action_id = serializers.UUIDField()
    action = serializers.CharField(max_length=20)
    status = serializers.ChoiceField(choices=[AgentActionState.SUCCEEDED, AgentActionState.FAILED])
    detail = serializers.CharField(allow_blank=True, required=False, default="")
    output = serializers.DictField(required=False, default=dict)
    finished_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class DesiredActionOut(serializers.Serializer):
    id = serializers.UUIDField()
    action = serializers.CharField()
    params = serializers.DictField()


class MeteringGrantOut(serializers.Serializer):
    grant = serializers.CharField(
        help_text="opaque, signed by the billing ledger; send it with every meter event "
        "of this allocation in [valid_from, valid_until)"
    )
    allocation_id = serializers.UUIDField()
    tenant_id = serializers.UUIDField()
    sku = serializers.CharField(help_text="instance-type name")
    gpus = serializers.IntegerField(help_text="GPUs metered: quantity ≤ gpus × seconds")
    valid_from = serializers.DateTimeField()
    valid_until = serializers.DateTimeField(help_text="a few hours ahead; renewed while the allocation lives")


class DesiredStateOut(serializers.Serializer):
    lifecycle = serializers.CharField()
    allocation_id = serializers.UUIDField(allow_null=True)
    tenant_id = serializers.UUIDField(allow_null=True)
    actions = DesiredActionOut(many=True)
    sku = serializers.CharField()
    gpus = serializers.IntegerField()
    metering_grants = MeteringGrantOut(many=True, help_text="one per live allocation on this node")
    access = serializers.DictField(
        allow_null=True,
        help_text="the tenant's access while the node serves a live allocation: allocation_id, user, keys "
        "(public only: id, fingerprint, public_key), image (id, name, versions), mounts (volume_id, path, source, "
        "fstype, size_gb) and revision; null otherwise",
    )


class NodeActionIn(serializers.Serializer):
    action = serializers.CharField(max_length=50)
    reason = serializers.CharField(max_length=2000, allow_blank=True, required=False, default="")
    force = serializers.BooleanField(
        required=False,
        default=False,
        help_text="decommission, sanitize, retire and dispose refuse a node a tenant holds (409 node_allocated) "
        "unless this is true",
    )


class DriveOut(serializers.Serializer):
    id = serializers.UUIDField()
    serial = serializers.CharField()
    sanitized = serializers.BooleanField()


class NodeOut(serializers.Serializer):
    """Built from a node plus per-page lookups (`context`: allocations, drives, conditions)."""

    id = serializers.UUIDField()
    hostname = serializers.CharField()
    site = serializers.CharField(source="rack.hall.site.slug")
    hall = serializers.CharField(source="rack.hall.name")
    rack = serializers.CharField(source="rack.name")
    node_type = serializers.CharField(source="node_type.slug")
    generation = serializers.CharField(source="node_type.generation")
    gpu_count = serializers.IntegerField(source="node_type.gpus_per_node")
    fabric_domain = serializers.CharField(source="fabric_domain.name", allow_null=True, default=None)
    management_address = serializers.IPAddressField(allow_null=True, help_text="the operators' network")
    data_address = serializers.IPAddressField(allow_null=True, help_text="what tenants ssh to")
    lifecycle = serializers.CharField()
    target_lifecycle = serializers.CharField()
    state_deadline = serializers.DateTimeField(allow_null=True)
    power_state = serializers.CharField()
    health = serializers.CharField()
    cordoned = serializers.BooleanField()
    cordon_reason = serializers.CharField()
    attribution = serializers.CharField()
    last_error = serializers.CharField()
    conditions = serializers.SerializerMethodField()
    allocation_id = serializers.SerializerMethodField()
    drives = serializers.SerializerMethodField()

    def get_conditions(self, node) -> list[dict]:
        return self.context["conditions"].get(node.pk, [])

    def get_allocation_id(self, node) -> str | None:
        allocation_id = self.context["allocations"].get(node.pk)
        return str(allocation_id) if allocation_id else None

    def get_drives(self, node) -> list[dict]:
        return DriveOut(self.context["drives"].get(node.pk, []), many=True).data


class NodeEventOut(serializers.ModelSerializer):
    class Meta:
        model = NodeEvent
        fields = ["at", "actor", "action", "from_state", "to_state", "reason"]


# ---- end of life: sanitisation records, checklist steps, custody


class SanitizationRecordIn(serializers.Serializer):
    method = serializers.ChoiceField(
        choices=SanitizationMethod.choices, help_text="NIST SP 800-88: clear, purge or destroy"
    )
    technique = serializers.CharField(max_length=200, help_text="e.g. NVMe sanitize crypto erase, overwrite, shred")
    tool = serializers.CharField(max_length=200)
    verified = serializers.BooleanField()
    evidence = serializers.CharField(
        max_length=sanitization.MAX_EVIDENCE_CHARS,
        help_text="what proves it: tool output, verification read-back, photo reference",
    )


class SanitizationRecordOut(serializers.Serializer):
    id = serializers.UUIDField()
    drive_id = serializers.UUIDField()
    drive_serial = serializers.CharField(source="drive.serial")
    node_id = serializers.UUIDField(source="drive.node_id")
    method = serializers.CharField()
    technique = serializers.CharField()
    tool = serializers.CharField()
    verified = serializers.BooleanField()
    evidence = serializers.CharField()
    actor = serializers.CharField()
    source = serializers.CharField()
    performed_at = serializers.DateTimeField()


class ReasonIn(serializers.Serializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class DriveStatusIn(serializers.Serializer):
    serial = serializers.CharField(max_length=64)
    status = serializers.CharField(max_length=200, help_text="e.g. sealed in tamper-evident bag 12345, unsanitised")


NAMED_DESTINATIONS = [(v, label) for v, label in CustodyDestination.choices if v != CustodyDestination.UNSPECIFIED]


class CustodyTransferIn(serializers.Serializer):
    from_party = serializers.CharField(max_length=200, help_text="who hands the node over (e.g. the site)")
    to_party = serializers.CharField(max_length=200, help_text="the party that receives it")
    destination_kind = serializers.ChoiceField(
        choices=NAMED_DESTINATIONS,
        required=False,
        allow_blank=True,
        default="",
        help_text="the kind of party that receives it; decides the drives' NIST SP 800-88 method: own_site and "
        "own_lab clear, anything leaving the organisation purge (destroy where purge is impossible). "
        "Required for a disposal; an RMA shipment goes to rma_vendor",
    )
    document_ref = serializers.CharField(max_length=200, help_text="bill of lading, sale contract, certificate")
    at = serializers.DateTimeField(required=False, help_text="when custody passed (not in the future); now if omitted")
    kind = serializers.ChoiceField(
        choices=CustodyKind.choices,
        default=CustodyKind.DISPOSAL,
        help_text="rma_shipment: the drives ship with the node under the carrier's custody",
    )
    carrier = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    drive_status = DriveStatusIn(
        many=True,
        required=False,
        default=list,
        max_length=64,
        help_text="rma_shipment: the status of every drive aboard",
    )

    def validate_at(self, value):
        if value > timezone.now():
            raise serializers.ValidationError("when custody passed cannot be in the future")
        return value

    def validate(self, attrs):
        kind, destination = attrs.get("kind"), attrs.get("destination_kind")
        if kind == CustodyKind.RMA_SHIPMENT and destination not in ("", CustodyDestination.RMA_VENDOR):
            raise serializers.ValidationError({"destination_kind": "an RMA shipment goes to rma_vendor"})
        if kind != CustodyKind.RMA_SHIPMENT and not destination:
            raise serializers.ValidationError(
                {
                    "destination_kind": "name the kind of party the node goes to: it decides the sanitisation its drives need"
                }
            )
        return attrs


class DataHandlingOut(serializers.Serializer):
    node_id = serializers.UUIDField()
    hostname = serializers.CharField()
    lifecycle = serializers.CharField()
    drives_total = serializers.IntegerField()
    drives_sanitized = serializers.IntegerField()
    unsanitized_drives = serializers.ListField(child=serializers.DictField())
    bmc_reset_at = serializers.DateTimeField(allow_null=True)
    bmc_reset_evidence = serializers.DictField(
        allow_null=True, help_text="the BMC's answer to the Redfish reset, or what the operator recorded"
    )
    asset_tags_removed_at = serializers.DateTimeField(allow_null=True)
    custody_transfers = serializers.IntegerField()
    retire_missing = serializers.ListField(child=serializers.CharField())
    dispose_missing = serializers.ListField(child=serializers.CharField())
    destination = serializers.CharField(
        help_text="inside (clear) or outside (purge, destroy where purge is impossible): the strongest of the custody "
        "transfers made, every disposition plan covering the node, or outside when neither says"
    )
    destination_basis = serializers.ListField(
        child=serializers.DictField(),
        help_text="what decides the destination: [{source, destination_kind, leaves_organisation, minimum_method, text}]",
    )
    custody = serializers.ListField(
        child=serializers.DictField(),
        help_text="every custody transfer: party, destination_kind, leaves_organisation, required_method",
    )
    certificate = serializers.DictField(
        help_text="available: whether the certificate of sanitisation can be issued; refusals: where the "
        "transfers, records and events disagree"
    )
    inventory_reported_at = serializers.DateTimeField(allow_null=True, help_text="when the agent last counted drives")
    drives = serializers.ListField(
        child=serializers.DictField(), help_text="every drive: serial, required_method, record_id, ok, problem"
    )
    rma_gate = serializers.DictField(help_text="the same gate for an RMA (drives sanitised, or shipped aboard)")


class SoftwareComponentIn(serializers.Serializer):
    component = serializers.RegexField(
        COMPONENT_NAME_RE, max_length=40, help_text="e.g. gpu_driver, gpu_vbios, kernel, fabric_manager"
    )
    version = serializers.CharField(max_length=100, allow_blank=True, required=False, default="")
    state = serializers.ChoiceField(choices=ComponentState.choices)
    detail = serializers.CharField(max_length=300, allow_blank=True, required=False, default="")

    def validate_version(self, value):
        if not value.isprintable():
            raise serializers.ValidationError("The version must be printable text.")
        return value


class SoftwareInventoryIn(serializers.Serializer):
    observed_at = serializers.DateTimeField(help_text="when the agent read the stack (RFC 3339, UTC)")
    components = SoftwareComponentIn(many=True, max_length=MAX_COMPONENTS, allow_empty=False)

    def validate_observed_at(self, value):
        if value > timezone.now() + MAX_FUTURE_SKEW:
            raise serializers.ValidationError(
                "observed_at is more than 5 min ahead of the server's clock; fix the node's time sync (NTP/PTP)."
            )
        return value

    def validate_components(self, value):
        names = [c["component"] for c in value]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise serializers.ValidationError(f"Each component at most once; repeated: {', '.join(duplicated)}.")
        return value


class BaselineIn(serializers.Serializer):
    node_type = serializers.SlugField(max_length=50, help_text="the node type's slug, e.g. h100-sxm-8x")
    name = serializers.CharField(max_length=80, validators=[validate_display_text])
    versions = serializers.DictField(
        child=serializers.CharField(max_length=100), help_text='{"gpu_driver": "570.133.20", ...}'
    )
    golden = serializers.BooleanField(required=False, default=False)
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")

    def validate_versions(self, value):
        errors = baseline_version_errors(value)
        if errors:
            raise serializers.ValidationError(errors)
        return value


class BaselineOut(serializers.Serializer):
    id = serializers.UUIDField()
    node_type = serializers.CharField(source="node_type.slug")
    name = serializers.CharField()
    versions = serializers.DictField(child=serializers.CharField())
    golden = serializers.BooleanField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    golden_set_by = serializers.CharField()
    golden_set_at = serializers.DateTimeField(allow_null=True)


class DriftVersionOut(serializers.Serializer):
    actual = serializers.CharField(help_text="the version the nodes run, or '- (missing)' / 'v (failed)'")
    count = serializers.IntegerField()
    hostnames = serializers.ListField(child=serializers.CharField(), help_text="the first 50, sorted")


class DriftComponentOut(serializers.Serializer):
    component = serializers.CharField()
    node_type = serializers.CharField()
    baseline = serializers.CharField()
    expected = serializers.CharField()
    nodes_on_baseline = serializers.IntegerField()
    nodes_drifting = serializers.IntegerField()
    drifting = DriftVersionOut(many=True)


class RolloutIn(serializers.Serializer):
    baseline_id = serializers.UUIDField()
    name = serializers.CharField(
        max_length=120, required=False, allow_blank=True, default="", validators=[validate_display_text]
    )
    node_ids = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        allow_null=True,
        default=None,
        max_length=5000,
        help_text="default: every node of the baseline's type that is off it",
    )
    canary_size = serializers.IntegerField(min_value=1, max_value=50, default=1)
    wave_size = serializers.IntegerField(min_value=1, max_value=500, default=4)
    max_domain_share = serializers.DecimalField(
        max_digits=3, decimal_places=2, min_value=Decimal("0.01"), max_value=Decimal("0.50"), default=Decimal("0.25")
    )
    capacity_floor_gpus = serializers.IntegerField(min_value=0, max_value=10_000_000, default=0)
    max_failures = serializers.IntegerField(min_value=0, max_value=1000, default=0)
    drain_minutes = serializers.IntegerField(min_value=1, max_value=7 * 24 * 60, default=120)
    force = serializers.BooleanField(default=False)
    force_reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class RolloutNodeOut(serializers.Serializer):
    node_id = serializers.UUIDField()
    hostname = serializers.CharField(source="node.hostname")
    wave = serializers.IntegerField()
    state = serializers.CharField()
    taken_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    detail = serializers.CharField()


class RolloutOut(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    baseline_id = serializers.UUIDField()
    baseline = serializers.CharField(source="baseline.name")
    node_type = serializers.CharField(source="baseline.node_type.slug")
    state = serializers.CharField()
    paused_reason = serializers.CharField()
    canary_size = serializers.IntegerField()
    wave_size = serializers.IntegerField()
    max_domain_share = serializers.DecimalField(max_digits=3, decimal_places=2)
    capacity_floor_gpus = serializers.IntegerField()
    max_failures = serializers.IntegerField()
    drain_minutes = serializers.IntegerField()
    force = serializers.BooleanField()
    force_reason = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="nodes per state")


class RolloutDetailOut(RolloutOut):
    nodes = RolloutNodeOut(many=True)


class RolloutControlIn(serializers.Serializer):
    action = serializers.ChoiceField(choices=["pause", "resume", "cancel"])
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


# ---- out-of-band: BMC records and power actions (docs/bmc.md)


class BmcResetIn(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, allow_blank=True, required=False, default="")
    manual = serializers.BooleanField(
        required=False,
        default=False,
        help_text="record a reset an operator did by hand (the reason is its evidence) instead of asking the BMC",
    )


class BMCIn(serializers.Serializer):
    """Credentials are write-only: they are never part of any answer."""

    redfish_url = serializers.CharField(
        max_length=300,
        help_text="the BMC's Redfish service, e.g. https://10.1.2.3, inside BMC_NETWORKS; a new address without "
        "new credentials clears the stored ones",
    )
    system_path = serializers.CharField(max_length=300, allow_blank=True, required=False, default="")
    username = serializers.CharField(max_length=256, required=False, write_only=True)
    password = serializers.CharField(max_length=256, required=False, write_only=True, style={"input_type": "password"})
    address = serializers.CharField(
        max_length=253,
        required=False,
        allow_blank=True,
        help_text="the BMC's IP address or DNS name (default: the URL's host)",
    )
    mac = serializers.CharField(max_length=17, required=False, allow_blank=True)
    tls_ca_pem = serializers.CharField(
        max_length=65536, required=False, allow_blank=True, help_text="PEM CA certificate trusted for this BMC alone"
    )
    tls_pin_sha256 = serializers.CharField(
        max_length=95, required=False, allow_blank=True, help_text="SHA-256 of the BMC's own certificate (hex)"
    )
    reason = serializers.CharField(max_length=2000, allow_blank=True, required=False, default="")


class PowerActionIn(serializers.Serializer):
    action = serializers.ChoiceField(choices=PowerAction.choices)
    reason = serializers.CharField(max_length=2000, allow_blank=True, required=False, default="")


class PowerActionOut(serializers.Serializer):
    id = serializers.UUIDField()
    action = serializers.CharField()
    state = serializers.CharField(help_text="pending, accepted (by the BMC), succeeded (observed) or failed")
    requested_by = serializers.CharField()
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()
    sent_at = serializers.DateTimeField(allow_null=True)
    deadline = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    reset_type = serializers.CharField(help_text="the Redfish ResetType sent")
    bmc_response = serializers.CharField(help_text="what the BMC answered")
    detail = serializers.CharField()


class BMCOut(serializers.Serializer):
    node_id = serializers.UUIDField()
    hostname = serializers.CharField()
    address = serializers.CharField(allow_null=True)
    mac = serializers.CharField(allow_null=True)
    redfish_url = serializers.CharField(allow_null=True)
    system_path = serializers.CharField(allow_null=True)
    tls = serializers.CharField(help_text="how its certificate is checked: pinned, own_ca or default")
    credentials_set = serializers.BooleanField(
        help_text="whether credentials are stored for the current address (they are never shown)"
    )
    credentials_changed_at = serializers.DateTimeField(allow_null=True)
    reachable = serializers.BooleanField(allow_null=True)
    last_checked_at = serializers.DateTimeField(allow_null=True)
    last_ok_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField()
    last_error_kind = serializers.CharField()
    power_state = serializers.CharField(help_text="what the BMC (or the agent) last reported")
    desired_power = serializers.CharField(help_text="on, off, or empty for no opinion")
    drift_since = serializers.DateTimeField(allow_null=True)
    power_actions = PowerActionOut(many=True, help_text="the last 10, newest first")


def bmc_body(node, status: dict) -> dict:
    bmc = status["bmc"]
    return BMCOut(
        {
            "node_id": node.pk,
            "hostname": node.hostname,
            "address": bmc.address if bmc else None,
            "mac": bmc.mac if bmc else None,
            "redfish_url": bmc.redfish_url if bmc else None,
            "system_path": bmc.system_path if bmc else None,
            "tls": ("pinned" if bmc.tls_pin_sha256 else "own_ca" if bmc.tls_ca_pem else "default")
            if bmc
            else "default",
            "credentials_set": bool(bmc and bmc.has_credentials),
            "credentials_changed_at": bmc.credentials_changed_at if bmc else None,
            "reachable": bmc.reachable if bmc else None,
            "last_checked_at": bmc.last_checked_at if bmc else None,
            "last_ok_at": bmc.last_ok_at if bmc else None,
            "last_error": bmc.last_error if bmc else "",
            "last_error_kind": bmc.last_error_kind if bmc else "",
            "power_state": status["power_state"],
            "desired_power": bmc.desired_power if bmc else "",
            "drift_since": bmc.drift_since if bmc else None,
            "power_actions": status["actions"],
        }
    ).data


class BMCEnrolmentIn(serializers.Serializer):
    addresses = serializers.ListField(
        child=serializers.CharField(max_length=100),
        min_length=1,
        max_length=256,
        help_text="BMC addresses, URLs, CIDR blocks (10.0.1.0/28) or ranges (10.0.1.10-10.0.1.40); at most 256 in all",
    )
    scheme = serializers.ChoiceField(choices=["https", "http"], default="https", required=False)
    username = serializers.CharField(max_length=256, write_only=True)
    password = serializers.CharField(max_length=256, write_only=True, style={"input_type": "password"})
    rack_id = serializers.UUIDField()
    node_type = serializers.SlugField(max_length=50)
    hostname_prefix = serializers.RegexField(r"^[a-z0-9][a-z0-9-]{0,39}$", help_text="e.g. r07-gpu; numbered 001, 002…")
    u_start = serializers.IntegerField(min_value=1, max_value=60, default=1, required=False)


class EnrolmentOut(serializers.Serializer):
    enrolled = serializers.ListField(
        child=serializers.DictField(), help_text="[{hostname, serial, system_path, u_position}]"
    )
    skipped = serializers.ListField(child=serializers.DictField(), help_text="[{address, system_path, serial, why}]")
    unreachable = serializers.ListField(child=serializers.DictField(), help_text="[{address, kind, detail}]")


class BMCEnrolledNodeOut(serializers.Serializer):
    id = serializers.UUIDField()
    hostname = serializers.CharField()
    serial = serializers.CharField()
    node_type = serializers.CharField(source="node_type.slug")
    rack = serializers.CharField(source="rack.name")
    lifecycle = serializers.CharField()
    redfish_url = serializers.CharField(source="bmc.redfish_url", help_text="the BMC it was discovered at")
    system_path = serializers.CharField(source="bmc.system_path")
    enrolled_at = serializers.DateTimeField(source="created_at")


class GridProfileOut(serializers.Serializer):
    site_id = serializers.UUIDField()
    hours = serializers.IntegerField(help_text="hours in the file, all saved")
    replaced = serializers.IntegerField(help_text="of which hours that already had a figure")
    first_hour = serializers.DateTimeField()
    last_hour = serializers.DateTimeField()
    mean_kg_co2e_per_kwh = serializers.DecimalField(max_digits=6, decimal_places=4)
    sha256 = serializers.CharField(help_text="of the file as uploaded (also in the audit trail)")
