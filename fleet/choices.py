"""Fleet choice sets. Colours follow one palette so every page shows a state the same way."""

from django.db import models


class Lifecycle(models.TextChoices):
    """Node lifecycle (docs/design, "Node"). Transitions live in fleet.services.lifecycle only."""

    ENROLLED = "enrolled", "Enrolled"
    BRINGING_UP = "bringing_up", "Bringing up"
    BRING_UP_FAILED = "bring_up_failed", "Bring-up failed"
    BURN_IN = "burn_in", "Burn-in"
    BURN_IN_FAILED = "burn_in_failed", "Burn-in failed"
    AVAILABLE = "available", "Available"
    PROVISIONING = "provisioning", "Provisioning"
    PROVISION_FAILED = "provision_failed", "Provision failed"
    ACTIVE = "active", "Active"
    RELEASING = "releasing", "Releasing"
    WIPING = "wiping", "Wiping"
    WIPE_FAILED = "wipe_failed", "Wipe failed"
    QUARANTINED = "quarantined", "Quarantined"
    DRAINING = "draining", "Draining"
    REMEDIATING = "remediating", "Remediating"
    VALIDATING = "validating", "Validating"
    TRIAGE = "triage", "Triage"
    REPAIR = "repair", "Repair"
    RMA = "rma", "RMA"
    DECOMMISSIONING = "decommissioning", "Decommissioning"
    SANITIZING = "sanitizing", "Sanitizing"
    RETIRED = "retired", "Retired"
    DISPOSED = "disposed", "Disposed"


# The states the node reconciler watches (fleet.services.reconcile.WORKING_STATES, which checks
# it is this set): each waits on an agent step, a deadline or a tenant leaving. The node table
# keeps an index of just these rows so a pass claims them without walking the whole fleet.
RECONCILED_LIFECYCLES = (
    Lifecycle.BURN_IN,
    Lifecycle.PROVISIONING,
    Lifecycle.RELEASING,
    Lifecycle.WIPING,
    Lifecycle.DRAINING,
    Lifecycle.REMEDIATING,
    Lifecycle.VALIDATING,
    Lifecycle.SANITIZING,
)

LIFECYCLE_COLORS = {
    Lifecycle.ENROLLED: "#9aa5b1",
    Lifecycle.BRINGING_UP: "#c1a3e0",
    Lifecycle.BRING_UP_FAILED: "#d64545",
    Lifecycle.BURN_IN: "#f0b429",
    Lifecycle.BURN_IN_FAILED: "#d64545",
    Lifecycle.AVAILABLE: "#3ebd93",
    Lifecycle.PROVISIONING: "#62b0e8",
    Lifecycle.PROVISION_FAILED: "#d64545",
    Lifecycle.ACTIVE: "#2680c2",
    Lifecycle.RELEASING: "#84c5f4",
    Lifecycle.WIPING: "#b6e0fe",
    Lifecycle.WIPE_FAILED: "#d64545",
    Lifecycle.QUARANTINED: "#ef8e58",
    Lifecycle.DRAINING: "#f7c948",
    Lifecycle.REMEDIATING: "#e67635",
    Lifecycle.VALIDATING: "#fce588",
    Lifecycle.TRIAGE: "#ba2525",
    Lifecycle.REPAIR: "#a27c1a",
    Lifecycle.RMA: "#610316",
    Lifecycle.DECOMMISSIONING: "#7b8794",
    Lifecycle.SANITIZING: "#616e7c",
    Lifecycle.RETIRED: "#3e4c59",
    Lifecycle.DISPOSED: "#1f2933",
}


class PowerState(models.TextChoices):
    ON = "on", "On"
    OFF = "off", "Off"
    UNKNOWN = "unknown", "Unknown"


class WallPowerSource(models.TextChoices):
    """Who measured a node's wall draw."""

    BMC = "bmc", "BMC"
    PDU = "pdu", "PDU outlet"


class EnergySource(models.TextChoices):
    """How a figure of node power or energy is known: measured at the wall, estimated, or assumed."""

    BMC = "bmc", "BMC"
    PDU = "pdu", "PDU outlet"
    ESTIMATE = "estimate", "Estimate (GPU power + host share)"
    RATED = "rated", "Rated maximum"


class Health(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Degraded"
    UNHEALTHY = "unhealthy", "Unhealthy"
    UNKNOWN = "unknown", "Unknown"


HEALTH_COLORS = {
    Health.HEALTHY: "#3ebd93",
    Health.DEGRADED: "#f7c948",
    Health.UNHEALTHY: "#d64545",
    Health.UNKNOWN: "#9aa5b1",
}


class Attribution(models.TextChoices):
    """Who a cordon or outage is attributed to (drives SLA credits)."""

    PROVIDER = "provider", "Provider"
    TENANT = "tenant", "Tenant"
    NODE = "node", "Node"
    # Reported only by the node's own agent while a tenant had root on it: the incident is open,
    # the SLA credit waits until out-of-band evidence or an operator confirms (health.services.incidents).
    UNCONFIRMED = "unconfirmed", "Node-reported, unconfirmed"


class Cooling(models.TextChoices):
    AIR = "air", "Air"
    REAR_DOOR = "rear_door", "Rear-door heat exchanger"
    LIQUID = "liquid", "Liquid (direct-to-chip)"


class CoolingRequirement(models.TextChoices):
    AIR = "air", "Air"
    LIQUID = "liquid", "Liquid"
    AIR_OR_LIQUID = "air-or-liquid", "Air or liquid"


# Which rack cooling satisfies which node requirement.
COOLING_SATISFIES = {
    CoolingRequirement.AIR: {Cooling.AIR, Cooling.REAR_DOOR},
    CoolingRequirement.LIQUID: {Cooling.LIQUID},
    CoolingRequirement.AIR_OR_LIQUID: {Cooling.AIR, Cooling.REAR_DOOR, Cooling.LIQUID},
}


class FabricTechnology(models.TextChoices):
    IB_HDR = "ib-hdr", "InfiniBand HDR (200G)"
    IB_NDR = "ib-ndr", "InfiniBand NDR (400G)"
    IB_XDR = "ib-xdr", "InfiniBand XDR (800G)"
    ROCE = "roce", "RoCE"
    NVL72 = "nvl72", "NVLink (NVL72)"


class DriveInterface(models.TextChoices):
    NVME = "nvme", "NVMe"
    SATA = "sata", "SATA"
    SAS = "sas", "SAS"


class AgentAction(models.TextChoices):
    """Work the control plane asks a node agent to do (docs/api.md, action-results)."""

    PROVISION = "provision", "Provision"
    STOP = "stop", "Stop tenant workload"
    WIPE = "wipe", "Wipe"
    GPU_RESET = "gpu_reset", "GPU reset"
    REBOOT = "reboot", "Power cycle"
    DCGM_R1 = "dcgm_r1", "DCGM level 1"
    DCGM_R2 = "dcgm_r2", "DCGM level 2"
    DCGM_R3 = "dcgm_r3", "DCGM level 3"
    DCGM_R4 = "dcgm_r4", "DCGM level 4"
    BURN_IN = "burn_in", "Burn-in"
    SANITIZE_DRIVE = "sanitize_drive", "Sanitize drive"
    UPGRADE = "upgrade", "Upgrade software to a baseline"
    SYNC_ACCESS = "sync_access", "Apply the tenant's access (keys, mounts)"


class AgentActionState(models.TextChoices):
    PENDING = "pending", "Pending"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class SanitizationMethod(models.TextChoices):
    """NIST SP 800-88 Rev. 1 sanitisation methods."""

    CLEAR = "clear", "Clear"
    PURGE = "purge", "Purge"
    DESTROY = "destroy", "Destroy"


class SanitizationSource(models.TextChoices):
    AGENT = "agent", "Node agent"
    OPERATOR = "operator", "Operator"


class CustodyKind(models.TextChoices):
    DISPOSAL = "disposal", "Disposal (buyer or recycler)"
    RMA_SHIPMENT = "rma_shipment", "RMA shipment with drives aboard"


class CustodyDestination(models.TextChoices):
    """Where a custody transfer takes the hardware. Each kind has a row in
    core/reference/sanitisation.csv (NIST SP 800-88) that says whether the media leaves the
    organisation's control and which method every drive needs first."""

    OWN_SITE = "own_site", "Another site of the organisation"
    OWN_LAB = "own_lab", "The organisation's lab"
    LESSEE = "lessee", "Lessee under contract"
    BUYER = "buyer", "Buyer"
    RECYCLER = "recycler", "Recycler"
    DESTRUCTION_VENDOR = "destruction_vendor", "Destruction vendor"
    RMA_VENDOR = "rma_vendor", "Vendor under RMA"
    # Only on transfers recorded before destinations were named; the API never accepts it.
    UNSPECIFIED = "unspecified", "Not recorded (treated as leaving)"


class DispositionOption(models.TextChoices):
    REDEPLOY = "redeploy", "Redeploy internally"
    LEASE = "lease", "Lease as a cheaper SKU"
    RESALE = "resale", "Resale"
    RECYCLE = "recycle", "Recycle"


class InventorySource(models.TextChoices):
    """Who reported a component of a node's software and firmware stack."""

    AGENT = "agent", "Node agent"
    BMC = "bmc", "BMC (Redfish firmware inventory)"


class ComponentState(models.TextChoices):
    """A reported component's state: `ok` (installed and running/loaded), `inactive` (installed,
    not running: a stopped service, an unloaded module), `failed`, or `missing` (not installed)."""

    OK = "ok", "OK"
    INACTIVE = "inactive", "Installed, not running"
    FAILED = "failed", "Failed"
    MISSING = "missing", "Not installed"


class RolloutState(models.TextChoices):
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"


class RolloutNodeState(models.TextChoices):
    """A node's way through a rollout: waiting its wave, waiting for its tenant to leave (cordoned,
    with a deadline), upgrading (agent work), validating (the gate), then done, failed or skipped."""

    PENDING = "pending", "Waiting for its wave"
    WAITING_FREE = "waiting_free", "Waiting for its tenant to leave"
    UPGRADING = "upgrading", "Upgrading"
    VALIDATING = "validating", "Validating"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"


ROLLOUT_NODE_FINISHED = frozenset({RolloutNodeState.DONE, RolloutNodeState.FAILED, RolloutNodeState.SKIPPED})


class PowerAction(models.TextChoices):
    """What may be asked of a node's BMC (Redfish ComputerSystem.Reset, fleet.services.bmc)."""

    POWER_ON = "power_on", "Power on"
    POWER_OFF = "power_off", "Power off (graceful shutdown)"
    FORCE_OFF = "force_off", "Force off"
    GRACEFUL_RESTART = "graceful_restart", "Graceful restart"
    FORCE_RESTART = "force_restart", "Force restart"
    POWER_CYCLE = "power_cycle", "Power cycle"


# The power state each action leaves the node in once the BMC has carried it out.
POWER_ACTION_RESULT = {
    PowerAction.POWER_ON: PowerState.ON,
    PowerAction.POWER_OFF: PowerState.OFF,
    PowerAction.FORCE_OFF: PowerState.OFF,
    PowerAction.GRACEFUL_RESTART: PowerState.ON,
    PowerAction.FORCE_RESTART: PowerState.ON,
    PowerAction.POWER_CYCLE: PowerState.ON,
}


class PowerActionState(models.TextChoices):
    """A BMC power action: queued, accepted by the BMC, then observed done (or not in time)."""

    PENDING = "pending", "Pending (not sent yet)"
    ACCEPTED = "accepted", "Accepted by the BMC"
    SUCCEEDED = "succeeded", "Observed done"
    FAILED = "failed", "Failed"


class BMCErrorKind(models.TextChoices):
    """Why the last BMC request failed, so the console can say what to do next."""

    UNREACHABLE = "unreachable", "Unreachable"
    BAD_CREDENTIALS = "bad_credentials", "Bad credentials"
    NOT_SUPPORTED = "not_supported", "Not supported by this BMC"
    REFUSED = "refused", "Refused by the BMC"
    NOT_FOUND = "not_found", "System not found"
    ERROR = "error", "BMC error"
    POLICY = "policy", "Refused by the BMC network policy"
