"""Where the control plane may open a connection: one guard for every address someone can
make it contact (BMC Redfish services now; tenants' webhook URLs are the next user).

Webhooks (operator paging channels and tenants' endpoints, `webhook_policy()`) go to the
public Internet: a *public* policy also allows every globally routable address (HTTPS only);
private ranges stay refused unless an operator lists them in NOTIFY_ALLOWED_NETWORKS, and the
always-refused addresses below stay refused whatever is listed.

A request the control plane makes on someone's behalf must not reach what only the control
plane can reach: its own services on loopback (PostgreSQL on :5432, Redis on :6379), the cloud
metadata service on link-local 169.254.169.254, or its own addresses. So an address is allowed
only when

1. it is not one that is *always refused*: loopback, link-local, unspecified, multicast,
   reserved or otherwise not globally routable special ranges (an IPv4 address inside IPv6, such
   as ::ffff:127.0.0.1, is judged as the IPv4 address), nor an address of this machine (found by
   asking the kernel whether it could bind it: no packet is sent) or one of
   `own_networks` (the control plane's load balancers, say);
2. it lies inside one of the policy's `networks` (the BMC management networks, for instance);
3. its scheme is allowed there: HTTPS everywhere, plain HTTP only on networks marked `+http`.

Names are resolved (DNS, never the target) and every address they resolve to must pass; the
same check runs again when the connection is made (`GuardedAdapter`), on the address actually
connected to, so a name that changes its answer between the check and the call (DNS
rebinding) is refused too, and so is a redirect. Nothing here contacts the target to decide.

`lab_origins` are exact origins (scheme://host:port) exempt from all of this: a development
emulator on 127.0.0.1. Settings refuse them without DEBUG.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urlsplit

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from core.errors import Invalid

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


class AddressRefused(Invalid):
    """The address is outside what the policy allows; nothing was contacted."""

    code = "address_refused"


@dataclass(frozen=True)
class AllowedNetwork:
    network: IPNetwork
    allow_http: bool = False

    def __str__(self) -> str:
        return f"{self.network}{'+http' if self.allow_http else ''}"


@dataclass(frozen=True)
class NetworkPolicy:
    """What one kind of outbound traffic may reach. `setting` names the setting to change, for
    the refusal's text."""

    networks: tuple[AllowedNetwork, ...] = ()
    own_networks: tuple[IPNetwork, ...] = ()
    lab_origins: frozenset[str] = field(default_factory=frozenset)
    setting: str = "the network policy"
    purpose: str = "this address"
    public: bool = False  # every globally routable address is allowed too (HTTPS only)


def parse_networks(text: str | list | tuple, *, setting: str) -> tuple[AllowedNetwork, ...]:
    """ "10.0.0.0/16, 10.9.0.0/24+http" → networks; ValueError naming the bad entry."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for raw in (str(i).strip() for i in items):
        if not raw:
            continue
        cidr, _, flag = raw.partition("+")
        if flag not in ("", "http"):
            raise ValueError(f"{setting}: {raw!r}: the only flag is +http (plain HTTP allowed on that network)")
        try:
            network = ipaddress.ip_network(cidr.strip(), strict=False)
        except ValueError as exc:
            raise ValueError(f"{setting}: {raw!r} is not a CIDR block ({exc})") from None
        out.append(AllowedNetwork(network, flag == "http"))
    return tuple(out)


def parse_origins(text: str | list | tuple) -> frozenset[str]:
    items = text.split(",") if isinstance(text, str) else list(text)
    return frozenset(origin_of(i.strip()) for i in items if str(i).strip())


def origin_of(url: str) -> str:
    """scheme://host:port with the default port written out, the host lower-cased (IPv6 in [])."""
    parts = urlsplit(url)
    scheme = (parts.scheme or "").lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme, 0)
    except ValueError:
        port = 0
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


def same_origin(a: str, b: str) -> bool:
    return origin_of(a) == origin_of(b)


def _plain(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or address.sixtofour
        if mapped is not None:
            return mapped
        if address.teredo is not None:
            return address.teredo[1]
    return address


@lru_cache(maxsize=4096)
def _is_local(address: str) -> bool:
    """Whether this machine holds `address` (it could bind a socket to it). No packet is sent."""
    parsed = ipaddress.ip_address(address)
    family = socket.AF_INET6 if parsed.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((address, 0))
    except OSError:
        return False
    return True


def always_refused(address: IPAddress, policy: NetworkPolicy) -> str | None:
    """Why no policy may allow `address`, or None."""
    plain = _plain(address)
    for check, why in (
        ("is_loopback", "a loopback address (this machine's own services)"),
        ("is_link_local", "a link-local address (the cloud metadata service lives there)"),
        ("is_unspecified", "the unspecified address"),
        ("is_multicast", "a multicast address"),
        ("is_reserved", "a reserved address"),
    ):
        if getattr(plain, check) or getattr(address, check):
            return why
    if str(plain) == "255.255.255.255":
        return "the broadcast address"
    if any(plain in network for network in policy.own_networks if network.version == plain.version):
        return "an address of the control plane itself"
    if _is_local(str(plain)):
        return "an address of this machine (the control plane itself)"
    return None


def check_address(address: IPAddress, *, scheme: str, policy: NetworkPolicy) -> None:
    """Raise AddressRefused when the policy does not allow `scheme` to `address`."""
    shown = str(address)
    why = always_refused(address, policy)
    if why:
        raise AddressRefused(
            f"{shown} is {why}; {policy.purpose} must not point there.",
            extra={"errors": [{"field": "address", "message": f"{shown}: {why}"}]},
        )
    plain = _plain(address)
    inside = [n for n in policy.networks if n.network.version == plain.version and plain in n.network]
    if not inside and policy.public and plain.is_global:
        inside = [AllowedNetwork(ipaddress.ip_network("0.0.0.0/0" if plain.version == 4 else "::/0"))]
    if not inside and policy.public:
        allowed = ", ".join(str(n) for n in policy.networks) or "none"
        raise AddressRefused(
            f"{shown} is a private or otherwise not globally routable address; {policy.purpose} must be reachable "
            f"on the Internet, or inside a range an operator allows ({policy.setting}: {allowed}).",
            extra={"errors": [{"field": "url", "message": f"{shown}: private address"}]},
        )
    if not inside:
        allowed = ", ".join(str(n) for n in policy.networks) or "none configured"
        raise AddressRefused(
            f"{shown} is outside the networks {policy.purpose} may be in ({policy.setting}: {allowed}).",
            extra={"errors": [{"field": "address", "message": f"{shown}: outside {policy.setting}"}]},
        )
    if scheme == "http" and not any(n.allow_http for n in inside):
        raise AddressRefused(
            f"Plain HTTP to {shown} is not allowed: use https, or mark its network +http in {policy.setting} "
            "(only for equipment that cannot speak TLS).",
            extra={"errors": [{"field": "address", "message": f"{shown}: http not allowed"}]},
        )


def resolve(host: str, port: int) -> list[IPAddress]:
    """The addresses `host` stands for (a literal is itself; a name is asked of DNS)."""
    host = host.strip("[]")
    try:
        return [ipaddress.ip_address(host.split("%", 1)[0] if "%" in host else host)]
    except ValueError:
        pass
    if host.lower().rstrip(".") in LOCAL_NAMES or host.lower().rstrip(".").endswith(".localhost"):
        return [ipaddress.ip_address("127.0.0.1")]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise AddressRefused(
            f"{host} does not resolve to an address; use an IP address or a name that resolves.",
            extra={"errors": [{"field": "address", "message": f"{host}: does not resolve"}]},
        ) from None
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos))


@dataclass(frozen=True)
class CheckedURL:
    url: str
    origin: str
    scheme: str
    host: str
    port: int
    addresses: tuple[IPAddress, ...]


def check_url(url: str, policy: NetworkPolicy) -> CheckedURL:
    """Check a URL before anything contacts it: scheme http(s), a host, no credentials in it, a
    port in range, and every address the host stands for allowed by the policy."""
    parts = urlsplit((url or "").strip())
    scheme = (parts.scheme or "").lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise AddressRefused(
            "Give a URL with scheme and host, e.g. https://10.1.2.3.",
            extra={"errors": [{"field": "address", "message": "http(s)://host[:port]"}]},
        )
    if parts.username or parts.password:
        raise AddressRefused(
            "Put credentials in their own fields, never in the address.",
            extra={"errors": [{"field": "address", "message": "no user:password@ in the URL"}]},
        )
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise AddressRefused(
            "The port is not a number from 1 to 65535.",
            extra={"errors": [{"field": "address", "message": "bad port"}]},
        ) from None
    origin = origin_of(url)
    host = parts.hostname
    if origin in policy.lab_origins:
        return CheckedURL(url, origin, scheme, host, port, ())
    addresses = resolve(host, port)
    for address in addresses:
        check_address(address, scheme=scheme, policy=policy)
    return CheckedURL(url, origin, scheme, host, port, tuple(addresses))


def check_host(host: str, policy: NetworkPolicy) -> None:
    """An address recorded for later use (an inventory field): an IP literal must be allowed
    (HTTPS assumed); a DNS name is judged when something connects to it, except names that
    can only mean this machine."""
    bare = host.strip().strip("[]")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        if bare.lower().rstrip(".") in LOCAL_NAMES or bare.lower().rstrip(".").endswith(".localhost"):
            check_address(ipaddress.ip_address("127.0.0.1"), scheme="https", policy=policy)
        return
    check_address(address, scheme="https", policy=policy)


# ---- the connection-time check -------------------------------------------------------------


class _GuardedConnectionMixin:
    policy: NetworkPolicy
    scheme_name: str

    def _new_conn(self):  # urllib3 calls this to open the TCP connection
        origin = origin_of(f"{self.scheme_name}://{self._dns_host}:{self.port}")
        if origin in self.policy.lab_origins:
            return super()._new_conn()
        addresses = resolve(self._dns_host, self.port)
        for address in addresses:
            check_address(address, scheme=self.scheme_name, policy=self.policy)
        original = self._dns_host
        self._dns_host = str(addresses[0])  # connect to the address just checked, not a fresh lookup
        try:
            return super()._new_conn()
        finally:
            self._dns_host = original  # TLS still verifies the certificate against the name


class GuardedAdapter(HTTPAdapter):
    """A requests adapter whose every connection is checked against `policy` at connect time.
    `pin_sha256`: the hex SHA-256 of the server's certificate (DER); when given, that exact
    certificate is required instead of a CA chain."""

    def __init__(self, policy: NetworkPolicy, *, pin_sha256: str = "", **kwargs):
        self.policy = policy
        self.pin_sha256 = pin_sha256.lower().replace(":", "")
        super().__init__(max_retries=0, **kwargs)

    def init_poolmanager(self, connections, maxsize, block=False, **pool_kwargs):
        if self.pin_sha256:
            pool_kwargs["assert_fingerprint"] = self.pin_sha256
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        policy = self.policy
        http_conn = type("GuardedHTTPConnection", (_GuardedConnectionMixin, HTTPConnection), {})
        https_conn = type("GuardedHTTPSConnection", (_GuardedConnectionMixin, HTTPSConnection), {})
        http_conn.policy, http_conn.scheme_name = policy, "http"
        https_conn.policy, https_conn.scheme_name = policy, "https"
        http_pool = type("GuardedHTTPPool", (HTTPConnectionPool,), {"ConnectionCls": http_conn})
        https_pool = type("GuardedHTTPSPool", (HTTPSConnectionPool,), {"ConnectionCls": https_conn})
        self.poolmanager.pool_classes_by_scheme = {"http": http_pool, "https": https_pool}

    def cert_verify(self, conn, url, verify, cert):
        if self.pin_sha256:
            verify = False  # the pin is the verification: the exact certificate, not a CA's word
        super().cert_verify(conn, url, verify, cert)


def guard_session(session, policy: NetworkPolicy, *, pin_sha256: str = "") -> None:
    """Make `session` (a requests.Session) reach only what `policy` allows: connect-time checks
    on every connection, no proxies from the environment (a proxy would be the address
    checked), no redirects followed (sessions callers pass allow_redirects=False as well)."""
    session.trust_env = False
    session.max_redirects = 0
    adapter = GuardedAdapter(policy, pin_sha256=pin_sha256)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
