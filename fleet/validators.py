"""Field validators for inventory data typed by people or read from import files.

Each raises ValidationError with a message that says what is wrong and what a valid value
looks like, so the admin form, the import preview and the API show the same sentence."""

import ipaddress
import re

from django.core.exceptions import ValidationError

# RFC 1123: labels of letters, digits and hyphens, 1-63 characters, not starting or ending
# with a hyphen; at most 253 characters in all.
_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_MAC = re.compile(r"^[0-9A-Fa-f]{2}([:-])[0-9A-Fa-f]{2}(?:\1[0-9A-Fa-f]{2}){4}$")
_GPU_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _is_dns_name(value: str) -> bool:
    name = value.removesuffix(".")
    return 0 < len(name) <= 253 and all(_LABEL.match(label) for label in name.split("."))


def validate_hostname(value: str) -> None:
    if not _is_dns_name(value):
        raise ValidationError(
            f"{value!r} is not a valid hostname: use letters, digits and hyphens in dot-separated labels of "
            "at most 63 characters, not starting or ending with a hyphen (RFC 1123), e.g. dc1-gpu00001.",
            code="invalid_hostname",
        )


def validate_bmc_address(value: str) -> None:
    """An IPv4/IPv6 address or a DNS name. A zone-scoped IPv6 address (fe80::1%eth0) names an
    interface of the machine that typed it, not the BMC, so it is refused rather than cut."""
    if "%" in value:
        raise ValidationError(
            f"{value!r} is a zone-scoped IPv6 address; the zone only means something on one host. "
            "Give the BMC's global or unique-local address, or its DNS name.",
            code="zoned_ipv6",
        )
    if _MAC.match(value):
        raise ValidationError(
            f"{value!r} is a MAC address; put it in the BMC MAC field and give the BMC's IP address or DNS name here.",
            code="mac_not_address",
        )
    try:
        ipaddress.ip_address(value)
        return
    except ValueError:
        pass
    if re.fullmatch(r"[0-9.]+", value) or not _is_dns_name(value):
        raise ValidationError(
            f"{value!r} is neither an IP address nor a DNS name; give e.g. 10.64.0.12, fd00::12 or bmc-gpu00001.dc1.",
            code="invalid_bmc_address",
        )


def normalise_mac(value: str) -> str:
    return value.lower().replace("-", ":")


def validate_mac(value: str) -> None:
    if not _MAC.match(value):
        raise ValidationError(
            f"{value!r} is not a MAC address; write six hex pairs, e.g. 3c:ec:ef:12:34:56.", code="invalid_mac"
        )


def validate_gpu_uuid(value: str) -> None:
    if not _GPU_UUID.match(value):
        raise ValidationError(
            f"{value!r} is not an NVIDIA GPU UUID; nvidia-smi -L prints them as "
            "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (lower-case hex).",
            code="invalid_gpu_uuid",
        )


def validate_node_address(value: str) -> None:
    """A node's management or data-plane address: one unicast IP a host can be reached at (not
    loopback, unspecified, multicast, link-local or reserved)."""
    try:
        address = ipaddress.ip_address(str(value))
    except ValueError:
        raise ValidationError(f"{value!r} is not an IP address (IPv4 or IPv6)") from None
    if address.is_loopback or address.is_unspecified or address.is_multicast or address.is_link_local:
        raise ValidationError(f"{value} cannot address a node (loopback, unspecified, multicast or link-local)")
    if address.is_reserved:
        raise ValidationError(f"{value} is in a reserved range")
