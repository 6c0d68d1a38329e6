"""Health choice sets."""

from django.db import models


class Severity(models.TextChoices):
    """Ordered from harmless to fatal (docs/design, "Health policy")."""

    INFO = "info", "Info"
    WARN = "warn", "Warn"
    # The GPU should be reset, but not at the tenant's cost: no new placements; the reset runs
    # when the node is next free (Xid 94 "reset the GPU when convenient").
    DEFER = "defer", "Reset at next release"
    # A person decides (CONTACT_SUPPORT, CHECK_MECHANICALS, UPDATE_SWFW, an unknown Xid): the
    # tenant keeps the node, no new placements, an operator task names the signal.
    HOLD = "hold", "Operator decision"
    RESET = "reset", "GPU reset"
    REBOOT = "reboot", "Power cycle"
    REPAIR = "repair", "Repair ticket"  # a cable or transceiver: a power cycle would not fix it
    FATAL = "fatal", "Fatal"


SEVERITY_RANK = {
    Severity.INFO: 0,
    Severity.WARN: 1,
    Severity.DEFER: 2,
    Severity.HOLD: 3,
    Severity.RESET: 4,
    Severity.REBOOT: 5,
    Severity.REPAIR: 6,
    Severity.FATAL: 7,
}
ACTIONABLE = (Severity.RESET, Severity.REBOOT, Severity.REPAIR, Severity.FATAL)
HELD = (Severity.DEFER, Severity.HOLD)  # the node keeps its tenant and takes no new work
TO_TRIAGE = (Severity.REPAIR, Severity.FATAL)  # pulled straight to triage, no reset or power cycle


class ConditionStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    CLEARED = "cleared", "Cleared"


class ConditionEventKind(models.TextChoices):
    RAISED = "raised", "Raised"
    CLEARED = "cleared", "Cleared"


class CheckName(models.TextChoices):
    DCGM_R1 = "dcgm_r1", "DCGM level 1"
    DCGM_R2 = "dcgm_r2", "DCGM level 2"
    DCGM_R3 = "dcgm_r3", "DCGM level 3"
    DCGM_R4 = "dcgm_r4", "DCGM level 4"
    NCCL_ALLREDUCE = "nccl_allreduce", "NCCL all-reduce"
    IB_LINK = "ib_link", "InfiniBand link"
    NVME_SMART = "nvme_smart", "NVMe SMART"
    BURN_IN = "burn_in", "Burn-in"


class CheckStatus(models.TextChoices):
    PASS = "pass", "Pass"
    WARN = "warn", "Warn"
    FAIL = "fail", "Fail"


class IncidentState(models.TextChoices):
    OPEN = "open", "Open"
    STABILISED = "stabilised", "Stabilised"
    DIAGNOSED = "diagnosed", "Diagnosed"
    REPAIRED = "repaired", "Repaired"
    CLOSED = "closed", "Closed"


class IncidentOpener(models.TextChoices):
    POLICY = "policy", "Health policy"
    OPERATOR = "operator", "Operator"


class IncidentStep(models.TextChoices):
    DETECT = "detect", "Detect"
    STABILISE = "stabilise", "Stabilise"
    DIAGNOSE = "diagnose", "Diagnose"
    REPAIR = "repair", "Repair"
    RETURN = "return", "Return"
    PAGE = "page", "Page"
    NOTE = "note", "Note"
    CLOSE = "close", "Close"


class IncidentScope(models.TextChoices):
    """What an incident is about: one node, or a shared cause behind several (correlated lapses)."""

    NODE = "node", "Node"
    LEAF = "leaf", "Leaf switch"
    RACK = "rack", "Rack (PDU or top-of-rack switch)"
    SITE = "site", "Site (network or control plane lost the fleet)"
    CONTROL_PLANE = "control_plane", "Control plane outage"
    FABRIC_LEAF = "fabric_leaf", "Fabric leaf switch (links lost together)"
    FABRIC_DOMAIN = "fabric_domain", "Fabric domain (spine or subnet manager)"


class PagingKind(models.TextChoices):
    PAGERDUTY = "pagerduty", "PagerDuty (Events API v2)"
    WEBHOOK = "webhook", "Signed webhook"
    EMAIL = "email", "E-mail"


class PagingTier(models.TextChoices):
    PRIMARY = "primary", "Primary: paged when the incident opens"
    ESCALATION = "escalation", "Escalation: paged when a page stays unacknowledged"
