"""Each node's baseboard management controller (its Redfish service) and the power actions
asked of it. Credentials are stored encrypted (fleet.services.bmc_credentials); nothing that
reads these rows for people (admin, API, console) ever shows them."""

from django.db import models
from django.db.models import Q

from core.ids import uuid7
from core.models import BaseModel
from core.netguard import origin_of

from ..choices import BMCErrorKind, PowerAction, PowerActionState, PowerState
from ..validators import normalise_mac, validate_bmc_address, validate_mac
from .nodes import Node


class NodeBMC(BaseModel):
    """Where a node's BMC answers and how to log in. `desired_power` is what operators and the
    lifecycle want; the node's `power_state` is what the BMC last said (the power sync loop).

    Everything that says where the BMC is (its address, MAC and Redfish URL) lives here, behind
    this model's permissions (`fleet.change_nodebmc`, `fleet.view_nodebmc`), never on the node.
    Credentials are bound to the origin they were entered for (`credentials_origin`): a record
    whose address changed without new credentials has none (fleet.services.bmc_credentials)."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="bmc")
    address = models.CharField(
        max_length=253, blank=True, validators=[validate_bmc_address], help_text="the BMC's IP address or DNS name"
    )
    mac = models.CharField(
        max_length=17,
        blank=True,
        validators=[validate_mac],
        verbose_name="BMC MAC",
        help_text="the BMC's MAC address, e.g. 3c:ec:ef:12:34:56",
    )
    redfish_url = models.URLField(
        max_length=300,
        blank=True,
        help_text="the BMC's Redfish service root, e.g. https://10.1.2.3 (scheme and host); empty until it is set",
    )
    system_path = models.CharField(
        max_length=300,
        blank=True,
        help_text="the node's system, e.g. /redfish/v1/Systems/1; empty when the BMC manages one system",
    )
    username_encrypted = models.TextField(blank=True, help_text="Fernet token; never shown")
    password_encrypted = models.TextField(blank=True, help_text="Fernet token; never shown")
    credentials_changed_at = models.DateTimeField(null=True, blank=True)
    credentials_origin = models.CharField(
        max_length=300,
        blank=True,
        help_text="the scheme://host:port the credentials were entered for; used nowhere else",
    )
    tls_ca_pem = models.TextField(
        blank=True,
        verbose_name="TLS CA certificate",
        help_text="PEM certificate(s) of the CA that signed this BMC's certificate, trusted for it alone",
    )
    tls_pin_sha256 = models.CharField(
        max_length=64,
        blank=True,
        verbose_name="pinned certificate (SHA-256)",
        help_text="SHA-256 of this BMC's own certificate (DER, hex): that certificate and no other (a self-signed one)",
    )
    inventory = models.JSONField(
        default=dict,
        blank=True,
        help_text="what the BMC reported of the system at enrolment: serial, model, manufacturer, uuid, MACs",
    )
    desired_power = models.CharField(
        max_length=8, choices=PowerState.choices, blank=True, help_text="what the node should be; empty: no opinion"
    )
    drift_since = models.DateTimeField(
        null=True, blank=True, help_text="since when the BMC's answer differs from the desired power state"
    )
    reachable = models.BooleanField(null=True, help_text="whether the last request reached the BMC")
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_kind = models.CharField(max_length=16, choices=BMCErrorKind.choices, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    power_read_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="when the power sync last read the chassis power (for nodes whose agent reports none); "
        "equal to the node's wall_power_at while that reading is the BMC's own",
    )
    firmware_checked_at = models.DateTimeField(
        null=True, blank=True, help_text="when the firmware inventory was last asked of the BMC (every 6 h)"
    )

    class Meta:
        verbose_name = "node BMC"
        indexes = [models.Index(fields=["last_checked_at"], name="fleet_nodebmc_checked_idx")]

    def __str__(self) -> str:
        return f"BMC of {self.node_id} at {self.redfish_url or self.address or '(no address)'}"

    def clean(self):
        super().clean()
        if self.mac:
            self.mac = normalise_mac(self.mac)

    @property
    def credentials_bound(self) -> bool:
        """The stored credentials were entered for the address the record now names."""
        return bool(self.credentials_origin) and self.credentials_origin == origin_of(self.redfish_url or "")

    @property
    def has_credentials(self) -> bool:
        return bool(self.username_encrypted and self.password_encrypted) and self.credentials_bound


class BMCPowerAction(models.Model):
    """One power action asked of a node's BMC, kept as its record: who asked, what the BMC
    answered, and whether the power state it leads to was observed before the deadline.
    At most one unfinished action per node (the database enforces it), so asking twice is
    harmless and two different asks cannot race each other on one BMC."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="power_actions")
    action = models.CharField(max_length=20, choices=PowerAction.choices)
    state = models.CharField(max_length=10, choices=PowerActionState.choices, default=PowerActionState.PENDING)
    requested_by = models.CharField(max_length=200)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(help_text="the resulting power state must be observed by then")
    finished_at = models.DateTimeField(null=True, blank=True)
    reset_type = models.CharField(max_length=32, blank=True, help_text="the Redfish ResetType sent")
    bmc_response = models.TextField(blank=True, help_text="what the BMC answered (status, message)")
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["node"],
                condition=Q(state__in=["pending", "accepted"]),
                name="fleet_bmcpoweraction_one_open_per_node",
            )
        ]
        indexes = [models.Index(fields=["state", "deadline"], name="fleet_bmcpoweraction_open_idx")]

    def __str__(self) -> str:
        return f"{self.action} on {self.node_id} ({self.state})"
