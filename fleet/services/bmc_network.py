"""The BMC network policy: where the control plane may send BMC traffic (core.netguard, with
the BMC settings). Every BMC address is checked here when it is entered (enrolment, admin, API,
import) and again on every connection (fleet.services.bmc)."""

from django.conf import settings

from core.netguard import AddressRefused, CheckedURL, NetworkPolicy, check_host, check_url, parse_origins

__all__ = ["AddressRefused", "bmc_policy", "check_bmc_address", "check_redfish_url"]


def bmc_policy() -> NetworkPolicy:
    return NetworkPolicy(
        networks=tuple(settings.BMC_NETWORKS),
        own_networks=tuple(settings.CONTROL_PLANE_NETWORKS),
        lab_origins=parse_origins(list(settings.BMC_LAB_ORIGINS)),
        setting="BMC_NETWORKS",
        purpose="a BMC address",
    )


def check_redfish_url(url: str) -> CheckedURL:
    """Refuse (AddressRefused, nothing contacted) a Redfish URL outside the management networks."""
    return check_url(url, bmc_policy())


def check_bmc_address(address: str) -> None:
    """A BMC address recorded in the inventory (an IP literal is judged now; a name when used)."""
    if address:
        check_host(address, bmc_policy())
