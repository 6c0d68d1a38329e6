"""Enrolment from BMCs: point Hangar at a new rack's BMC addresses and it creates the nodes.

Each address's Redfish service is asked for its systems (a server's BMC serves one, a chassis
manager several); each system becomes a node in `enrolled` with its serial, the MACs of its
NICs and what the BMC says of its make and model (kept on the BMC record), placed in the
given rack from the given U upwards wherever the rack's space and power allow, with the BMC
record (credentials encrypted) already wired. A system whose serial is already in the fleet
is reported and left alone, so running it twice changes nothing.

Discovery talks to the network first, outside any transaction (bounded concurrency); the
nodes are then written in one transaction, all or nothing.

Every address is checked against the BMC network policy before anything is contacted: one
outside the management networks (or loopback, link-local, the control plane's own) refuses the
whole enrolment with the list of refused addresses, and nothing is contacted. An address that
does not answer is listed with a fixed sentence for its kind of failure, never with what the
remote side sent or the low-level connection error.
"""

import ipaddress
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.db import transaction

from core.errors import Invalid
from core.netguard import AddressRefused, origin_of
from core.services.audit import record_audit
from fleet.choices import Lifecycle
from fleet.models import Node, NodeBMC, NodeType, Rack, placement_errors
from fleet.selectors.bmc import BMC_ENROLMENT_REASON_PREFIX

from . import bmc as redfish
from .bmc_credentials import Target, clean_redfish_url, clean_system_path, encrypt, verify_setting
from .bmc_network import check_redfish_url
from .inventory_import.events import record_enrolment

MAX_ADDRESSES = 256  # one enrolment: a few racks' BMCs
MAX_SYSTEMS = 512
DISCOVERY_CONCURRENCY = 16


@dataclass
class EnrolmentReport:
    enrolled: list[dict] = field(default_factory=list)  # [{hostname, serial, system_path, u_position}]
    skipped: list[dict] = field(default_factory=list)  # [{address, system_path, serial, why}]
    unreachable: list[dict] = field(default_factory=list)  # [{address, kind, detail}]

    def as_dict(self) -> dict:
        return {"enrolled": self.enrolled, "skipped": self.skipped, "unreachable": self.unreachable}


def expand_addresses(spec: list[str], *, scheme: str = "https") -> list[str]:
    """Redfish base URLs from addresses, URLs, CIDR blocks (10.0.1.0/28) or ranges
    (10.0.1.10-10.0.1.40), at most MAX_ADDRESSES in all."""
    urls: list[str] = []
    for item in (s.strip() for s in spec if s and s.strip()):
        if "://" in item:
            urls.append(clean_redfish_url(item))
            continue
        if _is_authority(item):  # host:port, [v6]:port, or a name
            urls.append(clean_redfish_url(f"{scheme}://{item}"))
            continue
        try:
            if "/" in item:
                network = ipaddress.ip_network(item, strict=False)
                if network.num_addresses > MAX_ADDRESSES + 2:
                    raise ValueError(f"{network.num_addresses} addresses; at most {MAX_ADDRESSES} per enrolment")
                hosts = [str(h) for h in network.hosts()]
            elif "-" in item:
                first, last = (ipaddress.ip_address(p.strip()) for p in item.split("-", 1))
                if int(last) < int(first) or int(last) - int(first) >= MAX_ADDRESSES:
                    raise ValueError("range backwards or too long")
                hosts = [str(ipaddress.ip_address(int(first) + i)) for i in range(int(last) - int(first) + 1)]
            else:
                hosts = [str(ipaddress.ip_address(item))]
        except ValueError as exc:
            raise Invalid(
                f"{item!r} is not an address, a CIDR block, a range (a-b) or a URL ({exc}).",
                extra={"errors": [{"field": "addresses", "message": item}]},
            ) from None
        if len(urls) + len(hosts) > MAX_ADDRESSES:
            raise Invalid(f"At most {MAX_ADDRESSES} BMC addresses per enrolment; split the rack list.")
        urls += [clean_redfish_url(f"{scheme}://{h}" if ":" not in h else f"{scheme}://[{h}]") for h in hosts]
    if not urls:
        raise Invalid("Give at least one BMC address.", extra={"errors": [{"field": "addresses", "message": "empty"}]})
    return list(dict.fromkeys(urls))


def _is_authority(item: str) -> bool:
    """Not an address, a CIDR block or an a-b range: a host:port, a bracketed IPv6 with a port,
    or a DNS name, which become a URL with the enrolment's scheme."""
    if _is_ip(item) or "/" in item:
        return False
    return not ("-" in item and all(_is_ip(part) for part in item.split("-", 1)))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip())
    except ValueError:
        return False
    return True


def check_enrolment_addresses(urls: list[str]) -> None:
    """Refuse the enrolment (nothing contacted) when any address is outside the policy."""
    refused = []
    for url in urls:
        try:
            check_redfish_url(url)
        except AddressRefused as exc:
            refused.append({"field": "addresses", "message": f"{url}: {exc.detail}"})
    if refused:
        raise AddressRefused(
            f"{len(refused)} of {len(urls)} BMC address(es) are not allowed by the BMC network policy "
            "(BMC_NETWORKS); nothing was contacted. Enrol only addresses in the management networks.",
            extra={"errors": refused[:50]},
        )


def _discover(url: str, username: str, password: str) -> tuple[str, list, redfish.BMCError | None]:
    target = Target(url=url, system_path="", username=username, password=password, verify=verify_setting())
    try:
        return url, redfish.discover_systems(target), None
    except redfish.BMCError as exc:
        return url, [], exc


def _free_u(rack: Rack, node_type: NodeType, start: int, placed: list[tuple]) -> int | None:
    for u in range(max(1, start), rack.u_height - node_type.u_height + 2):
        if not placement_errors(rack=rack, node_type=node_type, u_position=u, fabric_domain=None, others=placed):
            return u
    return None


def enrol_from_bmcs(
    *,
    addresses: list[str],
    username: str,
    password: str,
    rack: Rack,
    node_type: NodeType,
    hostname_prefix: str,
    actor: str,
    u_start: int = 1,
    scheme: str = "https",
) -> EnrolmentReport:
    urls = expand_addresses(addresses, scheme=scheme)
    if not username or not password:
        raise Invalid("The BMCs' username and password are needed to list their systems.")
    check_enrolment_addresses(urls)
    with ThreadPoolExecutor(max_workers=min(DISCOVERY_CONCURRENCY, len(urls))) as pool:
        found = list(pool.map(lambda u: _discover(u, username, password), urls))
    report = EnrolmentReport()
    for url, _systems, error in found:
        if error is not None:
            report.unreachable.append({"address": url, "kind": error.kind, "detail": redfish.public_detail(error)})
    systems = []
    for url, listed, _ in found:
        for system in listed:
            try:
                path = clean_system_path(system.system_path)
            except Invalid:
                path = ""
            if not path or not system.serial:
                report.skipped.append(
                    {
                        "address": url,
                        "system_path": "",
                        "serial": "",
                        "why": "the BMC listed a system outside its "
                        "own Redfish tree or without an identity; not enrolled",
                    }
                )
                continue
            systems.append((url, system))
    systems = systems[:MAX_SYSTEMS]
    _write(report, systems, username, password, rack, node_type, hostname_prefix, actor, u_start)
    return report


@transaction.atomic
def _write(report, systems, username, password, rack, node_type, prefix, actor, u_start) -> None:
    rack = Rack.objects.select_for_update().select_related("hall__site").get(pk=rack.pk)
    known = set(Node.objects.filter(serial__in=[s.serial for _, s in systems]).values_list("serial", flat=True))
    placed = [
        (o.hostname, o.u_position, o.node_type.u_height, o.node_type.node_kw)
        for o in Node.objects.filter(rack=rack).select_related("node_type")
    ]
    taken = set(Node.objects.filter(hostname__startswith=prefix).values_list("hostname", flat=True))
    number = 1
    next_u = u_start
    username_token, password_token = encrypt(username), encrypt(password)
    for url, system in systems:
        if system.serial in known:
            report.skipped.append(
                {"address": url, "system_path": system.system_path, "serial": system.serial, "why": "already enrolled"}
            )
            continue
        u = _free_u(rack, node_type, next_u, placed)
        if u is None:
            report.skipped.append(
                {
                    "address": url,
                    "system_path": system.system_path,
                    "serial": system.serial,
                    "why": f"no room for a {node_type.slug} in rack {rack.name} (space or power)",
                }
            )
            continue
        while f"{prefix}{number:03d}" in taken:
            number += 1
        hostname = f"{prefix}{number:03d}"
        taken.add(hostname)
        node = Node(
            hostname=hostname,
            serial=system.serial,
            rack=rack,
            u_position=u,
            node_type=node_type,
            lifecycle=Lifecycle.ENROLLED,
        )
        node.full_clean()
        node.save()
        NodeBMC.objects.create(
            node=node,
            address=urlsplit(url).hostname or "",
            redfish_url=url,
            system_path=system.system_path,
            username_encrypted=username_token,
            password_encrypted=password_token,
            credentials_origin=origin_of(url),
            inventory={
                "serial": system.serial,
                "model": system.model,
                "manufacturer": system.manufacturer,
                "uuid": system.uuid,
                "name": system.name,
                "macs": system.macs,
            },
        )
        Node.objects.filter(pk=node.pk).update(power_state=system.power_state)
        placed.append((hostname, u, node_type.u_height, node_type.node_kw))
        next_u = u + node_type.u_height
        record_enrolment(node, actor=actor, reason=f"{BMC_ENROLMENT_REASON_PREFIX}{url}{system.system_path}")
        record_audit(
            actor=actor,
            action="node.enrol_from_bmc",
            target=node,
            after={"serial": system.serial, "bmc": f"{url}{system.system_path}", "macs": system.macs},
        )
        report.enrolled.append(
            {"hostname": hostname, "serial": system.serial, "system_path": system.system_path, "u_position": u}
        )
