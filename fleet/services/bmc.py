"""The one Redfish client of the control plane: every call Hangar makes to a node's BMC goes
through here, on top of sushy (the OpenStack bare-metal project's Redfish library).

Functions take a `Target` (address, system, decrypted credentials; see bmc_credentials) and
touch no database, so the power sync loop can run many of them in threads.

Every connection goes through the BMC network policy (fleet.services.bmc_network, checked on
the address actually connected to), follows no redirect, uses no proxy from the environment,
and every link a BMC answers with is followed only to the same origin as the target: a device
whose Redfish document points at http://127.0.0.1:8772/… is refused, never fetched with the
BMC's credentials. Nothing is fetched from the public internet (message registries included). Each has a
connect and a read timeout; reads are retried with backoff when the BMC cannot be reached or
fails internally (5xx); a reset is sent once (a retried ForceRestart could cycle a node
twice), and whether it happened is then read back. Every failure is a `BMCError` whose
`detail` is the text put on the node's `last_error`: what happened and what to do next.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

import requests
import sushy
from django.conf import settings
from sushy import auth as sushy_auth
from sushy import connector as sushy_connector
from sushy import exceptions as sx
from sushy.resources import constants as redfish_constants
from sushy.resources.system import system as sushy_system

from core.netguard import AddressRefused, NetworkPolicy, guard_session, same_origin
from fleet.choices import BMCErrorKind, PowerAction, PowerState

from .bmc_credentials import Target
from .bmc_network import bmc_policy

REDFISH_ROOT = "/redfish/v1/"

# Redfish ResetType per action, in order of preference: the first the BMC offers is used.
# A BMC without PowerCycle gets the nearest hard equivalent, ForceRestart (what Ironic does).
RESET_TYPES: dict[str, tuple[str, ...]] = {
    PowerAction.POWER_ON: ("On", "ForceOn"),
    PowerAction.POWER_OFF: ("GracefulShutdown",),
    PowerAction.FORCE_OFF: ("ForceOff",),
    PowerAction.GRACEFUL_RESTART: ("GracefulRestart",),
    PowerAction.FORCE_RESTART: ("ForceRestart",),
    PowerAction.POWER_CYCLE: ("PowerCycle", "ForceRestart"),
}
REDFISH_POWER = {
    "On": PowerState.ON,
    "Off": PowerState.OFF,
    "PoweringOn": PowerState.ON,  # on its way: a cycle seen mid-way counts as on only once it is On
    "PoweringOff": PowerState.OFF,
}


class BMCError(Exception):
    """A BMC request that failed: `kind` (BMCErrorKind) and the operator's text."""

    def __init__(self, kind: str, detail: str):
        self.kind = kind
        self.detail = detail
        super().__init__(detail)


@dataclass(frozen=True)
class PowerReading:
    power_state: str  # PowerState
    redfish_state: str


@dataclass(frozen=True)
class Inventory:
    """What enrolment needs from a system: identity and the NICs' MACs."""

    system_path: str
    serial: str
    model: str
    manufacturer: str
    uuid: str
    name: str
    macs: list[str] = field(default_factory=list)
    power_state: str = PowerState.UNKNOWN


@dataclass(frozen=True)
class ActionAnswer:
    reset_type: str
    response: str


class GuardedConnector(sushy_connector.Connector):
    """sushy's connector, held to the BMC network policy and to the target's origin."""

    def __init__(self, target: Target):
        super().__init__(
            target.url,
            verify=target.verify,
            server_side_retries=0,  # retries are ours (with_retries), with backoff
            default_request_timeout=settings.BMC_READ_TIMEOUT_S,
            connect_timeout=settings.BMC_CONNECT_TIMEOUT_S,
        )
        guard_session(self._session, bmc_policy(), pin_sha256=target.pin_sha256)

    def _op(self, method, path="", data=None, headers=None, blocking=False, timeout=None, **kwargs):
        url = path if urlsplit(path).netloc else urljoin(self._url, path)
        if not same_origin(url, self._url):
            raise BMCError(
                BMCErrorKind.POLICY,
                f"the BMC at {self._url} linked to a resource at another address; links are followed only on the "
                "BMC's own address, so it was not fetched. Check what answers at this address.",
            )
        kwargs["allow_redirects"] = False
        return super()._op(method, path, data, headers, blocking, timeout, **kwargs)


_NOWHERE = requests.Session()  # sushy's "public" connector (message registries): reaches nothing
guard_session(_NOWHERE, NetworkPolicy(setting="nothing", purpose="a public registry"))


def _root(target: Target) -> sushy.Sushy:
    # Basic auth: every BMC and the emulator take it, and it saves a session round trip per call.
    return sushy.Sushy(
        target.url,
        auth=sushy_auth.BasicAuth(username=target.username, password=target.password),
        root_prefix=REDFISH_ROOT,
        connector=GuardedConnector(target),
        public_connector=_NOWHERE,
    )


def _value(field) -> str:
    """sushy gives enum members for Redfish enumerations; Hangar keeps their Redfish strings."""
    return str(getattr(field, "value", field) or "")


def _system(target: Target):
    return _root(target).get_system(target.system_path or None)


def translate(exc: Exception, target: Target, doing: str) -> BMCError:
    """A sushy (or requests) failure → the kind and the sentence the operator reads."""
    where = f"the BMC at {target.url}"
    if isinstance(exc, BMCError):
        return exc
    if isinstance(exc, AddressRefused):
        return BMCError(BMCErrorKind.POLICY, f"{where} was not contacted while {doing}: {exc.detail}")
    if isinstance(exc, sx.ConnectionError) and "fingerprint" in str(exc).lower():
        return BMCError(
            BMCErrorKind.POLICY,
            f"{where} presented a certificate other than the one pinned on its BMC record while {doing}; nothing was "
            "sent. If the BMC's certificate was replaced, pin the new one.",
        )
    if isinstance(exc, sx.AccessError):
        return BMCError(
            BMCErrorKind.BAD_CREDENTIALS,
            f"{where} refused the login while {doing} (HTTP {exc.status_code}). Enter the BMC's current username "
            "and password on the node's BMC record.",
        )
    if isinstance(exc, sx.ResourceNotFoundError):
        if target.system_path and target.system_path in str(exc):
            return BMCError(
                BMCErrorKind.NOT_FOUND,
                f"{where} has no {target.system_path} (HTTP 404) while {doing}. Correct the system path on the BMC "
                "record (enrolment discovery lists the BMC's systems).",
            )
        return BMCError(
            BMCErrorKind.NOT_SUPPORTED,
            f"{where} does not serve what {doing} needs (HTTP 404: {_short(exc)}); this BMC does not offer it.",
        )
    if isinstance(exc, sx.UnknownDefaultError):
        return BMCError(
            BMCErrorKind.NOT_FOUND,
            f"{where} manages several systems; set the node's system path (e.g. /redfish/v1/Systems/1).",
        )
    if isinstance(exc, sx.MissingActionError | sx.InvalidParameterValueError | sx.MissingAttributeError):
        return BMCError(
            BMCErrorKind.NOT_SUPPORTED,
            f"{where} does not support {doing}: {exc}. Use another action, or do it at the rack.",
        )
    if isinstance(exc, sx.ServerSideError):
        return BMCError(
            BMCErrorKind.ERROR,
            f"{where} failed internally while {doing} (HTTP {exc.status_code}: {exc.detail or 'no detail'}). Retry; "
            "if it persists, reset the BMC (its own reset, not the host's).",
        )
    if isinstance(exc, sx.HTTPError):
        return BMCError(
            BMCErrorKind.REFUSED,
            f"{where} refused {doing} (HTTP {exc.status_code}: {exc.detail or 'no detail'}). Check the node's state "
            "on the BMC (a lock, a pending job) and retry.",
        )
    if isinstance(exc, sx.ConnectionError):
        return BMCError(
            BMCErrorKind.UNREACHABLE,
            f"{where} did not answer while {doing} ({_short(exc)}). Check the BMC's network port and power and the "
            "address on the BMC record; the power sync keeps trying every minute.",
        )
    return BMCError(BMCErrorKind.ERROR, f"{where} answered unexpectedly while {doing}: {_short(exc)}.")


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:297] + "..."


RETRIED = (sx.ConnectionError, sx.ServerSideError)


def with_retries(call: Callable, target: Target, doing: str, *, sleep: Callable[[float], None] = time.sleep):
    """Run a read; on an unreachable BMC or a 5xx retry BMC_RETRIES times (backoff doubling)."""
    delay = settings.BMC_RETRY_BACKOFF_S
    for attempt in range(settings.BMC_RETRIES + 1):
        try:
            return call()
        except RETRIED as exc:
            if attempt == settings.BMC_RETRIES:
                raise translate(exc, target, doing) from exc
            sleep(delay)
            delay *= 2
        except Exception as exc:
            raise translate(exc, target, doing) from exc
    raise AssertionError("unreachable")  # pragma: no cover


# ---- power -------------------------------------------------------------------------------


def _system_only(target: Target):
    """The system resource in one GET, without the service root: the power sync's read, made
    every minute for every node. Needs the system path (enrolment and the admin set it)."""
    if not target.system_path:
        return _system(target)
    conn = GuardedConnector(target)
    conn.set_http_basic_auth(target.username, target.password)
    return sushy_system.System(conn, target.system_path)


def read_power_state(target: Target) -> PowerReading:
    def read():
        redfish = _value(_system_only(target).power_state)
        return PowerReading(REDFISH_POWER.get(redfish, PowerState.UNKNOWN), redfish)

    return with_retries(read, target, "reading the power state")


def allowed_reset_types(system) -> set[str]:
    return {_value(v) for v in system.get_allowed_reset_system_values()}


def power_action(target: Target, action: str) -> ActionAnswer:
    """Send one power action. The system (and what resets it allows) is read with retries;
    the reset itself is posted once."""
    if action not in RESET_TYPES:
        raise BMCError(BMCErrorKind.NOT_SUPPORTED, f"{action} is not a power action ({', '.join(RESET_TYPES)}).")
    doing = PowerAction(action).label.lower()
    system, allowed = with_retries(lambda: _system_and_resets(target), target, doing)
    reset_type = next((r for r in RESET_TYPES[action] if r in allowed), None)
    if reset_type is None:
        raise BMCError(
            BMCErrorKind.NOT_SUPPORTED,
            f"the BMC at {target.url} does not offer {' or '.join(RESET_TYPES[action])} for this system (it offers "
            f"{', '.join(sorted(allowed)) or 'no reset'}); choose one of those actions or act at the rack.",
        )
    try:
        system.reset_system(redfish_constants.ResetType(reset_type))
    except Exception as exc:
        raise translate(exc, target, f"{doing} ({reset_type})") from exc
    return ActionAnswer(reset_type=reset_type, response=f"{reset_type} accepted by {target.url}")


def _system_and_resets(target: Target):
    system = _system(target)
    return system, allowed_reset_types(system)


# ---- inventory, readings, firmware ----------------------------------------------------------


def _printable(value, limit: int = 100) -> str:
    """A value a BMC reported, kept only as plain printable text of bounded length."""
    text = "" if value is None else str(value)
    return "".join(ch for ch in text if ch.isprintable() and ord(ch) < 0x2028)[:limit].strip()


def _relative(path: str) -> str:
    """A resource path as the record keeps it: a path on the BMC's own origin, never a URL."""
    parts = urlsplit(path)
    return (parts.path if parts.netloc else path).rstrip("/")


PUBLIC_DETAIL = {
    BMCErrorKind.UNREACHABLE: "no Redfish service answered at this address (check the address, the BMC's port and power)",
    BMCErrorKind.BAD_CREDENTIALS: "the BMC refused these credentials",
    BMCErrorKind.NOT_FOUND: "the BMC did not serve the expected Redfish systems",
    BMCErrorKind.NOT_SUPPORTED: "the BMC does not offer what enrolment needs",
    BMCErrorKind.REFUSED: "the BMC refused the request",
    BMCErrorKind.ERROR: "the BMC answered with an error or with something that is not Redfish",
    BMCErrorKind.POLICY: "not contacted: refused by the BMC network policy",
}


def public_detail(error: BMCError) -> str:
    """A fixed sentence for the kind of failure: what an enrolment answer says, never the remote
    side's words or the connection's low-level error (which would make enrolment a port scanner
    that reports what answered)."""
    return PUBLIC_DETAIL.get(error.kind, PUBLIC_DETAIL[BMCErrorKind.ERROR])


def _inventory(system) -> Inventory:
    macs = []
    try:
        for nic in system.ethernet_interfaces.get_members():
            if nic.mac_address:
                macs.append(str(nic.mac_address).lower())
    except (sx.MissingAttributeError, sx.ResourceNotFoundError):
        pass  # a system without EthernetInterfaces still enrols; its MACs are entered by hand
    return Inventory(
        system_path=_relative(system.path),
        # Redfish SerialNumber is optional (the emulator has none): the system UUID stands in.
        serial=_printable(system.serial_number or system.uuid or system.identity),
        model=_printable(system.model),
        manufacturer=_printable(system.manufacturer),
        uuid=_printable(system.uuid, 64),
        name=_printable(system.name),
        macs=sorted({m for m in macs if len(m) <= 17}),
        power_state=REDFISH_POWER.get(_value(system.power_state), PowerState.UNKNOWN),
    )


def read_inventory(target: Target) -> Inventory:
    return with_retries(lambda: _inventory(_system(target)), target, "reading the system inventory")


def discover_systems(target: Target) -> list[Inventory]:
    """Every system a BMC (or a chassis manager) serves, with its inventory."""

    def read():
        root = _root(target)
        return [_inventory(s) for s in root.get_system_collection().get_members()]

    return with_retries(read, target, "listing the systems")


def read_power_watts(target: Target) -> int | None:
    """The chassis' consumed power (W) from Redfish `Chassis/*/Power` PowerControl, else the
    newer `Chassis/*/EnvironmentMetrics` PowerWatts, or None when the BMC keeps no reading. The chassis linked from the node's system are read
    first (a chassis manager serves several), then the BMC's chassis collection."""

    def read():
        system = _system(target)
        try:
            chassis_list = system.chassis
        except (sx.MissingAttributeError, sx.ResourceNotFoundError):
            chassis_list = []
        if not chassis_list:
            chassis_list = _root(target).get_chassis_collection().get_members()
        for chassis in chassis_list:
            watts = _power_control_watts(chassis)
            if watts is None:
                watts = _environment_metrics_watts(chassis)
            if watts is not None:
                return watts
        return None

    return with_retries(read, target, "reading the chassis power")


def _watts(value) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None


def _power_control_watts(chassis) -> int | None:
    """`Chassis/*/Power` (Power schema, deprecated in 2020 but what most BMCs serve)."""
    try:
        controls = chassis.power.json.get("PowerControl") or []
    except (sx.MissingAttributeError, sx.ResourceNotFoundError):
        return None
    return next((w for w in (_watts(c.get("PowerConsumedWatts")) for c in controls) if w is not None), None)


def _environment_metrics_watts(chassis) -> int | None:
    """`Chassis/*/EnvironmentMetrics` `PowerWatts.Reading`: the chassis' power in the schema
    that replaced Power (next to `PowerSubsystem`, which holds the supplies, not the draw)."""
    path = (chassis.json.get("EnvironmentMetrics") or {}).get("@odata.id")
    if not path:
        return None
    try:
        metrics = chassis._conn.get(path).json()
    except sx.ResourceNotFoundError:
        return None
    return _watts((metrics.get("PowerWatts") or {}).get("Reading"))


def read_firmware_inventory(target: Target) -> list[dict]:
    """UpdateService/FirmwareInventory: [{id, name, version, updateable}] (BMC, BIOS, NICs,
    GPUs where the BMC reports them). For software baselines."""

    def read():
        service = _root(target).get_update_service()
        items = []
        for item in service.firmware_inventory.get_members():
            items.append(
                {
                    "id": str(item.identity),
                    "name": str(item.name or ""),
                    "version": str(item.version or ""),
                    "updateable": bool(item.updateable),
                }
            )
        return items

    return with_retries(read, target, "reading the firmware inventory")


# ---- the BMC itself -----------------------------------------------------------------------


def reset_bmc_to_defaults(target: Target) -> ActionAnswer:
    """Redfish `#Manager.ResetToDefaults` (ResetAll): the BMC forgets its accounts, network and
    logs, which is what the disposition checklist wants before a node leaves."""
    doing = "resetting the BMC to factory defaults"

    def find():
        # The manager of this node's system (a chassis manager may serve several systems).
        manager = next(iter(_system(target).managers), None)
        if manager is None:
            raise BMCError(BMCErrorKind.NOT_SUPPORTED, f"the BMC at {target.url} lists no manager to reset.")
        return manager

    manager = with_retries(find, target, doing)
    actions = manager.json.get("Actions") or {}
    action = actions.get("#Manager.ResetToDefaults")
    if not action or not action.get("target"):
        offered = ", ".join(sorted(a for a in actions if a.startswith("#"))) or "no actions"
        raise BMCError(
            BMCErrorKind.NOT_SUPPORTED,
            f"the BMC at {target.url} offers no #Manager.ResetToDefaults ({offered}); reset it from its own "
            "interface or jumper and record the reset by hand with its evidence.",
        )
    try:
        response = manager._conn.post(action["target"], data={"ResetType": "ResetAll"})
    except Exception as exc:
        raise translate(exc, target, doing) from exc
    return ActionAnswer(
        reset_type="ResetToDefaults/ResetAll",
        response=f"HTTP {response.status_code} from {target.url}{action['target']}",
    )
