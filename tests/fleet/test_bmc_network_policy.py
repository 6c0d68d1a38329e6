"""BMC traffic goes only where it should, written as the attacks: enrolment pointed at the
control plane's PostgreSQL, Redis or metadata service (refused without contacting them); a user
with only `fleet.change_nodebmc` pointing a node's BMC at a listener of theirs (refused, or the
credentials cleared, never sent); a device whose Redfish links point elsewhere (not followed); a
device answering with other protocols' bytes (never echoed); TLS checked against the BMC's own
CA or pinned certificate; the BMC address and MAC behind the BMC record's permissions in
exports and imports."""

import base64
import datetime as dt
import ipaddress
import json
import socket
import ssl
import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.test import Client
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from core.netguard import AddressRefused, NetworkPolicy, check_url, origin_of, parse_networks
from core.services.tokens import create_api_token
from fleet.models import Node, NodeBMC, Rack
from fleet.services import bmc as redfish
from fleet.services.bmc_credentials import set_bmc, target_for
from fleet.services.power_sync import power_sync_pass
from tests.redfish import allow_lab_bmc

from .admin_helpers import client_for, csv_upload, staff_with

pytestmark = pytest.mark.django_db


# ---- the guard, on its own ------------------------------------------------------------------


def _policy(networks="10.0.0.0/8, 10.200.0.0/16+http, 2001:db8::/32") -> NetworkPolicy:
    return NetworkPolicy(networks=parse_networks(networks, setting="TEST"), setting="TEST", purpose="a BMC address")


def _own_address() -> str:
    """An address of this machine that is not loopback (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))
        except OSError:
            pytest.skip("this machine has no route off loopback")
        return sock.getsockname()[0]


@pytest.mark.parametrize(
    "url, why",
    [
        ("https://127.0.0.1:5432", "loopback"),
        ("https://127.9.9.9", "loopback"),
        ("https://[::1]:5432", "loopback"),
        ("https://[::ffff:127.0.0.1]", "loopback"),
        ("https://localhost:3306", "loopback"),
        ("https://db.localhost", "loopback"),
        ("https://169.254.169.254", "link-local"),
        ("https://[fe80::1]", "link-local"),
        ("https://0.0.0.0:6379", "unspecified"),
        ("https://224.0.0.1", "multicast"),
        ("https://172.16.0.1", "outside the networks"),
        ("https://8.8.8.8", "outside the networks"),
        ("http://10.1.2.3", "Plain HTTP"),
        ("ftp://10.1.2.3", "scheme and host"),
        ("https://user:pw@10.1.2.3", "credentials"),
        ("https://10.1.2.3:99999", "port"),
    ],
)
def test_addresses_the_control_plane_must_not_reach_are_refused(url, why):
    with pytest.raises(AddressRefused) as refused:
        check_url(url, _policy("0.0.0.0/0, ::/0, 10.200.0.0/16+http") if why != "outside the networks" else _policy())
    assert why in refused.value.detail


def test_the_control_plane_s_own_address_is_refused_even_inside_the_networks():
    own = _own_address()
    with pytest.raises(AddressRefused) as refused:
        check_url(f"https://{own}", _policy("0.0.0.0/0, ::/0"))
    assert "control plane itself" in refused.value.detail
    lb = NetworkPolicy(
        networks=parse_networks("10.0.0.0/8", setting="T"), own_networks=(ipaddress.ip_network("10.9.9.0/24"),)
    )
    with pytest.raises(AddressRefused):
        check_url("https://10.9.9.9", lb)


def test_allowed_addresses_pass():
    assert check_url("https://10.1.2.3", _policy()).origin == "https://10.1.2.3:443"
    assert check_url("http://10.200.4.5:8000", _policy()).scheme == "http"
    assert check_url("https://[2001:db8::5]", _policy()).port == 443


def _oracle(address: ipaddress.IPv4Address, networks: list[tuple[str, bool]], scheme: str) -> bool:
    """Written from docs/bmc.md, not from the guard: special ranges never; else inside a listed
    network, with http only where that network allows it."""
    specials = ["127.0.0.0/8", "169.254.0.0/16", "0.0.0.0/32", "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32"]
    if any(address in ipaddress.ip_network(s) for s in specials):
        return False
    inside = [http for cidr, http in networks if address in ipaddress.ip_network(cidr)]
    return bool(inside) and (scheme == "https" or any(inside))


@settings(max_examples=300, deadline=None)
@given(
    address=st.ip_addresses(v=4),
    networks=st.lists(st.tuples(st.ip_addresses(v=4), st.integers(0, 32), st.booleans()), min_size=0, max_size=3).map(
        lambda rows: [(str(ipaddress.ip_network(f"{a}/{p}", strict=False)), http) for a, p, http in rows]
    ),
    scheme=st.sampled_from(["http", "https"]),
)
def test_the_guard_agrees_with_the_rule_for_any_address_and_networks(address, networks, scheme):
    own = _local_addresses()
    if str(address) in own:
        return
    text = ", ".join(f"{cidr}{'+http' if http else ''}" for cidr, http in networks)
    try:
        check_url(f"{scheme}://{address}", _policy(text))
        allowed = True
    except AddressRefused:
        allowed = False
    assert allowed == _oracle(address, networks, scheme)


def _local_addresses() -> set[str]:
    try:
        return {_own_address()}
    except pytest.skip.Exception:
        return set()


# ---- enrolment: refused before anything is contacted ------------------------------------------


@pytest.fixture
def empty_rack(small_fleet):
    rack = Rack.objects.filter(nodes__isnull=False).first()
    rack.pk, rack.name, rack.row, rack.column = None, "r-policy", 91, 91
    rack.rated_power_kw = rack.cooling_capacity_kw = Decimal("60")
    rack.save()
    return rack


def _enrol(client, rack, addresses, scheme="https"):
    return client.post(
        "/api/v1/ops/bmc-enrolments",
        {
            "addresses": addresses,
            "scheme": scheme,
            "username": "root",
            "password": "S3cr3t-BMC-Pass!",
            "rack_id": str(rack.pk),
            "node_type": Node.objects.first().node_type.slug,
            "hostname_prefix": "probe-",
        },
        format="json",
    )


class Listener:
    """A TCP port on loopback that records whether anything connected to it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]

    def contacted(self) -> bool:
        try:
            conn, _ = self.sock.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True

    def close(self):
        self.sock.close()


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1:{port}",
        "[::1]:5432",
        "localhost:{port}",
        "169.254.169.254",
        "169.254.169.254/31",
        "127.0.0.1-127.0.0.3",
        "http://127.0.0.1:{port}/redfish/v1",
        "10.0.0.5:6379",  # inside the networks, but the plain-HTTP scheme below is not allowed there
    ],
)
def test_enrolment_of_the_control_planes_services_is_refused_without_contacting_them(ops_api, empty_rack, address):
    listener = Listener()
    try:
        response = _enrol(ops_api, empty_rack, [address.format(port=listener.port)], scheme="http")
        assert response.status_code == 400, response.content
        body = response.json()
        assert body["code"] == "address_refused" and "nothing was contacted" in body["detail"]
        assert "S3cr3t" not in response.content.decode()
        assert not listener.contacted()
    finally:
        listener.close()
    assert not Node.objects.filter(hostname__startswith="probe-").exists()


def test_enrolment_of_the_control_planes_own_address_is_refused(ops_api, empty_rack, settings):
    own = _own_address()
    settings.BMC_NETWORKS = parse_networks(f"{own}/32", setting="BMC_NETWORKS")
    response = _enrol(ops_api, empty_rack, [own])
    assert response.status_code == 400 and "control plane itself" in response.content.decode()


class FakeBMC:
    """A Redfish-looking HTTP service on loopback (a lab origin): answers `routes`, records
    every request with its Authorization header."""

    def __init__(self, routes: dict, *, raw: bytes | None = None):
        self.routes, self.requests = routes, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                owner.requests.append((self.path, self.headers.get("Authorization")))
                if raw is not None:  # not HTTP at all: another protocol's greeting
                    self.wfile.write(raw)
                    return
                route = owner.routes.get(self.path.rstrip("/"))
                if isinstance(route, tuple):  # (status, location): a redirect
                    self.send_response(route[0])
                    self.send_header("Location", route[1])
                    self.end_headers()
                    return
                payload = json.dumps(route or {}).encode()
                self.send_response(200 if route is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = allow_lab_bmc(f"http://127.0.0.1:{self.server.server_address[1]}")
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_bmc():
    started = []

    def start(routes=None, **kwargs):
        bmc = FakeBMC(routes or {}, **kwargs)
        started.append(bmc)
        return bmc

    yield start
    for bmc in started:
        bmc.stop()


def _system(state: str) -> dict:
    return {"@odata.id": "/redfish/v1/Systems/1", "Id": "1", "Name": "node", "PowerState": state}


def _root(systems_link: str) -> dict:
    return {
        "/redfish/v1": {"@odata.id": "/redfish/v1/", "Id": "RootService", "Systems": {"@odata.id": systems_link}},
    }


def test_redfish_links_are_followed_only_to_the_bmcs_own_origin(ops_api, empty_rack, fake_bmc):
    internal = fake_bmc({"/internal/api/json": {"SerialNumber": "internal-secret"}})
    device = fake_bmc(
        {
            **_root("/redfish/v1/Systems"),
            "/redfish/v1/Systems": {"Members": [{"@odata.id": f"{internal.url}/internal/api/json"}]},
        }
    )
    response = _enrol(ops_api, empty_rack, [device.url], scheme="http")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["enrolled"] == []
    assert [u["kind"] for u in body["unreachable"]] == ["policy"]
    assert internal.requests == []  # the other origin was never fetched, with or without credentials
    assert "internal-secret" not in response.content.decode()
    # nor through a redirect to it
    redirecting = fake_bmc({"/redfish/v1": (302, f"{internal.url}/internal/api/json")})
    assert _enrol(ops_api, empty_rack, [redirecting.url], scheme="http").status_code == 201
    assert internal.requests == []


def test_enrolment_answers_never_echo_what_the_remote_side_sent(ops_api, empty_rack, fake_bmc):
    mysql = fake_bmc(raw=b"J\x00\x00\x00\n5.7.44-MySQL-greeting\x00\x08\x00\x00\x00")
    response = _enrol(ops_api, empty_rack, [mysql.url], scheme="http")
    assert response.status_code == 201, response.content
    [unreachable] = response.json()["unreachable"]
    assert unreachable["detail"] == redfish.PUBLIC_DETAIL[unreachable["kind"]]
    assert "MySQL" not in response.content.decode() and "BadStatusLine" not in response.content.decode()


# ---- credentials bound to the address they were entered for -----------------------------------


@pytest.fixture
def node(small_fleet):
    return Node.objects.order_by("hostname").first()


def _bmc_editor(django_user_model) -> APIClient:
    """A staff user holding only fleet.change_nodebmc, with an operator token."""
    user = staff_with(django_user_model, "bmc-editor", "fleet.change_nodebmc")
    _, plain = create_api_token(kind="operator", user=user, actor="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


def test_pointing_a_bmc_at_a_listener_of_ones_own_is_refused_or_clears_the_credentials(
    node, fake_bmc, django_user_model
):
    real = fake_bmc({**_root("/redfish/v1/Systems"), "/redfish/v1/Systems/1": _system("On")})
    set_bmc(
        node=node,
        redfish_url=real.url,
        system_path="/redfish/v1/Systems/1",
        username="root",
        password="S3cr3t-BMC-Pass!",
        actor="test",
    )
    editor = _bmc_editor(django_user_model)
    # an address outside the management networks: 400, nothing changes, nothing is contacted
    listener = Listener()
    try:
        refused = editor.put(
            f"/api/v1/ops/nodes/{node.pk}/bmc",
            {"redfish_url": f"http://127.0.0.1:{listener.port}", "system_path": "/redfish/v1/Systems/1"},
            format="json",
        )
        assert refused.status_code == 400 and refused.json()["code"] == "address_refused"
        assert not listener.contacted()
    finally:
        listener.close()
    assert NodeBMC.objects.get(node=node).redfish_url == real.url
    # an address inside them (here a lab BMC the attacker controls): the credentials are cleared
    trap = fake_bmc({**_root("/redfish/v1/Systems"), "/redfish/v1/Systems/1": _system("On")})
    moved = editor.put(
        f"/api/v1/ops/nodes/{node.pk}/bmc",
        {"redfish_url": trap.url, "system_path": "/redfish/v1/Systems/1"},
        format="json",
    )
    assert moved.status_code == 200, moved.content
    assert moved.json()["credentials_set"] is False
    record = NodeBMC.objects.get(node=node)
    assert not record.username_encrypted and not record.credentials_origin
    power_sync_pass(budget_s=10)
    assert trap.requests == []  # the next sync pass sent nothing there, least of all the password


def test_an_address_changed_behind_the_service_carries_no_credentials(node, fake_bmc):
    real = fake_bmc({**_root("/redfish/v1/Systems"), "/redfish/v1/Systems/1": _system("On")})
    trap = fake_bmc({**_root("/redfish/v1/Systems"), "/redfish/v1/Systems/1": _system("On")})
    set_bmc(
        node=node,
        redfish_url=real.url,
        system_path="/redfish/v1/Systems/1",
        username="root",
        password="S3cr3t-BMC-Pass!",
        actor="test",
    )
    NodeBMC.objects.filter(node=node).update(redfish_url=trap.url)  # a raw write, not through set_bmc
    record = NodeBMC.objects.get(node=node)
    assert not record.has_credentials
    with pytest.raises(Exception, match="entered for another address"):
        target_for(record)
    power_sync_pass(budget_s=10)
    assert trap.requests == []


def test_the_same_address_keeps_its_credentials_and_new_ones_bind_to_the_new_address(node, fake_bmc):
    real = fake_bmc({**_root("/redfish/v1/Systems"), "/redfish/v1/Systems/1": _system("On")})
    set_bmc(
        node=node,
        redfish_url=real.url,
        system_path="/redfish/v1/Systems/1",
        username="root",
        password="pw",
        actor="test",
    )
    kept = set_bmc(node=node, redfish_url=real.url + "/", system_path="/redfish/v1/Systems/1", actor="test")
    assert kept.has_credentials and kept.credentials_origin == origin_of(real.url)
    other = fake_bmc({**_root("/redfish/v1/Systems"), "/redfish/v1/Systems/1": _system("Off")})
    rebound = set_bmc(
        node=node,
        redfish_url=other.url,
        system_path="/redfish/v1/Systems/1",
        username="root",
        password="pw2",
        actor="test",
    )
    assert rebound.has_credentials and rebound.credentials_origin == origin_of(other.url)
    assert redfish.read_power_state(target_for(rebound)).power_state == "off"
    assert other.requests[-1][1] == "Basic " + base64.b64encode(b"root:pw2").decode()


# ---- TLS: the BMC's own CA, or its pinned certificate -------------------------------------------


class TLSBMC:
    """A Redfish service over HTTPS with a self-signed certificate for 127.0.0.1."""

    def __init__(self, tmp_path):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bmc-selfsigned")])
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM).decode()
        self.pin = self.cert.fingerprint(hashes.SHA256()).hex()
        (tmp_path / "cert.pem").write_text(self.pem)
        (tmp_path / "key.pem").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        self.bmc = FakeBMC({**_root("/redfish/v1/Systems"), "/redfish/v1/Systems/1": _system("On")})
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
        self.bmc.server.socket = context.wrap_socket(self.bmc.server.socket, server_side=True)
        self.url = allow_lab_bmc(f"https://127.0.0.1:{self.bmc.server.server_address[1]}")


@pytest.fixture
def tls_bmc(tmp_path):
    bmc = TLSBMC(tmp_path)
    yield bmc
    bmc.bmc.stop()


def test_tls_is_verified_by_default_and_a_bmcs_own_ca_or_pin_is_trusted_for_it_alone(node, tls_bmc):
    record = set_bmc(
        node=node,
        redfish_url=tls_bmc.url,
        system_path="/redfish/v1/Systems/1",
        username="root",
        password="pw",
        actor="test",
    )
    with pytest.raises(redfish.BMCError) as failed:  # a self-signed certificate is not trusted by default
        redfish.read_power_state(target_for(record))
    assert failed.value.kind == "unreachable"
    assert tls_bmc.bmc.requests == []  # the handshake failed before any request (or password) went out
    with_ca = set_bmc(
        node=node,
        redfish_url=tls_bmc.url,
        system_path="/redfish/v1/Systems/1",
        username="root",
        password="pw",
        tls_ca_pem=tls_bmc.pem,
        actor="test",
    )
    assert redfish.read_power_state(target_for(with_ca)).power_state == "on"
    pinned = set_bmc(
        node=node,
        redfish_url=tls_bmc.url,
        system_path="/redfish/v1/Systems/1",
        username="root",
        password="pw",
        tls_ca_pem="",
        tls_pin_sha256=tls_bmc.pin,
        actor="test",
    )
    assert redfish.read_power_state(target_for(pinned)).power_state == "on"
    wrong = set_bmc(
        node=node,
        redfish_url=tls_bmc.url,
        system_path="/redfish/v1/Systems/1",
        username="root",
        password="pw",
        tls_pin_sha256="ab" * 32,
        actor="test",
    )
    asked = len(tls_bmc.bmc.requests)
    with pytest.raises(redfish.BMCError) as mismatch:
        redfish.read_power_state(target_for(wrong))
    assert mismatch.value.kind == "policy" and "pinned" in mismatch.value.detail
    assert len(tls_bmc.bmc.requests) == asked
    # changing the trust without the credentials clears them, as an address change does
    loosened = set_bmc(
        node=node,
        redfish_url=tls_bmc.url,
        system_path="/redfish/v1/Systems/1",
        tls_pin_sha256="",
        tls_ca_pem=tls_bmc.pem,
        actor="test",
    )
    assert not loosened.has_credentials


# ---- the BMC address and MAC: the BMC record's permissions in exports and imports ------------


def _export(client) -> list[str]:
    body = b"".join(client.get(reverse("admin:fleet_node_export"), {"format": "csv"}).streaming_content)
    return body.decode().splitlines()


def test_exports_carry_bmc_addresses_only_for_who_may_view_bmc_records(small_fleet, django_user_model):
    plain = client_for(Client, staff_with(django_user_model, "viewer", "fleet.view_node"))
    lines = _export(plain)
    assert "bmc_address" not in lines[0] and "10.64." not in "\n".join(lines)
    trusted = client_for(Client, staff_with(django_user_model, "bmc-viewer", "fleet.view_node", "fleet.view_nodebmc"))
    lines = _export(trusted)
    assert "bmc_address" in lines[0] and "10.64." in lines[1]


def _row(node, **bmc):
    return [
        node.hostname,
        node.serial,
        node.rack.name,
        node.u_position,
        node.node_type.slug,
        node.fabric_domain.name if node.fabric_domain else "",
        node.leaf_switch,
        bmc.get("address", ""),
        bmc.get("mac", ""),
        "",
    ]


def test_importing_bmc_addresses_needs_the_bmc_permission_and_the_networks(small_fleet, django_user_model, fake_bmc):
    node = Node.objects.order_by("hostname").first()
    perms = [f"fleet.{a}_node" for a in ("view", "add", "change")]
    without = client_for(Client, staff_with(django_user_model, "inv-no-bmc", *perms))
    url = reverse("admin:fleet_node_import")
    refused = without.post(url, {"file": csv_upload([_row(node, address="10.64.9.9")]), "allow_updates": "on"})
    assert refused.status_code == 403 and b"fleet.change_nodebmc" in refused.content
    allowed = client_for(Client, staff_with(django_user_model, "inv-bmc", *perms, "fleet.change_nodebmc"))
    outside = allowed.post(url, {"file": csv_upload([_row(node, address="169.254.169.254")]), "allow_updates": "on"})
    assert outside.status_code == 400 and "link-local" in outside.content.decode()
    # an address change through the import clears the stored credentials (bound to the old address)
    real = fake_bmc({**_root("/redfish/v1/Systems"), "/redfish/v1/Systems/1": _system("On")})
    set_bmc(
        node=node,
        redfish_url=real.url,
        system_path="/redfish/v1/Systems/1",
        username="root",
        password="pw",
        actor="test",
    )
    preview = allowed.post(url, {"file": csv_upload([_row(node, address="10.64.9.9")]), "allow_updates": "on"})
    assert preview.status_code == 200, preview.content
    done = allowed.post(url, {"confirm": "1", "staged": preview.context["staged"]})
    assert done.status_code == 302
    record = NodeBMC.objects.get(node=node)
    assert record.address == "10.64.9.9" and not record.has_credentials and not record.username_encrypted
    assert record.redfish_url.startswith("http://10.64.9.9:")
