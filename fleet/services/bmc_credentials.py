"""BMC records and their credentials: encrypted at rest with Fernet under BMC_CREDENTIAL_KEY
(never SECRET_KEY), written only here, audited without the secret, never read back for people.

Credentials are bound to where they were entered: the record keeps the origin
(scheme://host:port) and TLS trust they were set with, and they are sent nowhere else. Changing
the Redfish address or the TLS trust without giving the credentials again clears them, and a
record whose address no longer matches its credentials' origin (however it was changed) yields
no target: the next call cannot carry the password to an address someone else chose. Every
address is checked against the BMC network policy (fleet.services.bmc_network) before it is
stored.

The key setting may list several comma-separated keys: the first encrypts, any decrypts
(`MultiFernet`), so a key is rotated by putting the new one first and running
`rotate_bmc_credentials()` before the old one is dropped.
"""

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.errors import Invalid
from core.netguard import origin_of
from core.services.audit import record_audit
from fleet.models import Node, NodeBMC
from fleet.validators import normalise_mac, validate_bmc_address, validate_mac

from .bmc_network import check_bmc_address, check_redfish_url
from .lifecycle import record_node_event

MAX_SECRET_LENGTH = 256  # Redfish account names and passwords are far shorter on every BMC we know


class CredentialsUnreadable(Exception):
    """Stored credentials no key of BMC_CREDENTIAL_KEY opens (the key was replaced, not rotated)."""


def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(k.strip()) for k in settings.BMC_CREDENTIAL_KEY.split(",") if k.strip()])


def encrypt(plain: str) -> str:
    return _fernet().encrypt(plain.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise CredentialsUnreadable(
            "The stored BMC credentials cannot be decrypted with BMC_CREDENTIAL_KEY: the key was replaced "
            "rather than rotated. Enter the credentials again."
        ) from None


@dataclass(frozen=True)
class Target:
    """What the Redfish client needs to reach one system, decrypted for the call only. `verify`
    is True, False or a CA bundle path; `pin_sha256` requires that exact certificate."""

    url: str
    system_path: str
    username: str
    password: str
    verify: bool | str = True
    pin_sha256: str = ""

    def __repr__(self) -> str:  # never print the password in a traceback or log
        return f"Target(url={self.url!r}, system_path={self.system_path!r}, username=<hidden>)"


def verify_setting() -> bool | str:
    value = settings.BMC_VERIFY_TLS.strip()
    if value.lower() in ("true", "1", "yes", ""):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    return value  # a CA bundle path


def _ca_bundle(pem: str) -> str:
    """A file holding this BMC's CA (requests takes a path), named by its content."""
    directory = Path(settings.VAR_DIR) / "bmc-ca"
    path = directory / f"{hashlib.sha256(pem.encode()).hexdigest()}.pem"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(pem)
        os.replace(partial, path)
    return str(path)


def tls_verify(bmc: NodeBMC) -> bool | str:
    """How this BMC's certificate is checked: its own CA when it has one, else the setting."""
    return _ca_bundle(bmc.tls_ca_pem) if bmc.tls_ca_pem else verify_setting()


def target_for(bmc: NodeBMC) -> Target:
    if not (bmc.username_encrypted and bmc.password_encrypted):
        raise CredentialsUnreadable(f"No BMC credentials are stored for {bmc.node}; enter them on the BMC record.")
    if not bmc.credentials_bound:
        raise CredentialsUnreadable(
            f"The BMC credentials of {bmc.node} were entered for another address than {bmc.redfish_url or 'none'}; "
            "they are not sent there. Enter the credentials again for this address."
        )
    return Target(
        url=bmc.redfish_url.rstrip("/"),
        system_path=bmc.system_path,
        username=decrypt(bmc.username_encrypted),
        password=decrypt(bmc.password_encrypted),
        verify=tls_verify(bmc),
        pin_sha256=bmc.tls_pin_sha256,
    )


def clean_redfish_url(url: str) -> str:
    """Scheme and authority only: the client adds /redfish/v1 itself."""
    parts = urlsplit((url or "").strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid(
            "The Redfish address is a URL with scheme and host, e.g. https://10.1.2.3 or https://bmc-r01-u01.example.",
            extra={"errors": [{"field": "redfish_url", "message": "http(s)://host[:port]"}]},
        )
    if parts.username or parts.password:
        raise Invalid(
            "Put the credentials in their own fields, never in the address.",
            extra={"errors": [{"field": "redfish_url", "message": "no user:password@ in the URL"}]},
        )
    return f"{parts.scheme}://{parts.netloc}"


def clean_system_path(path: str) -> str:
    path = (path or "").strip()
    if path and not path.startswith("/redfish/v1/Systems/"):
        raise Invalid(
            "The system path is the Redfish system resource, e.g. /redfish/v1/Systems/1 (or empty for the only one).",
            extra={"errors": [{"field": "system_path", "message": "starts with /redfish/v1/Systems/"}]},
        )
    return path.rstrip("/")


def clean_ca_pem(pem: str) -> str:
    pem = (pem or "").strip()
    if not pem:
        return ""
    if len(pem) > 64 * 1024:
        raise Invalid("The CA certificate is over 64 KiB; give the issuing CA only.")
    try:
        x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        raise Invalid(
            "The CA certificate is not PEM (-----BEGIN CERTIFICATE----- …).",
            extra={"errors": [{"field": "tls_ca_pem", "message": "not a PEM certificate"}]},
        ) from None
    return pem + "\n"


def clean_pin(pin: str) -> str:
    pin = (pin or "").strip().lower().replace(":", "")
    if pin and not re.fullmatch(r"[0-9a-f]{64}", pin):
        raise Invalid(
            "The pinned certificate is its SHA-256 fingerprint: 64 hex digits (colons allowed), e.g. from "
            "`openssl x509 -noout -fingerprint -sha256`.",
            extra={"errors": [{"field": "tls_pin_sha256", "message": "64 hex digits"}]},
        )
    return pin


def _field(value: str, validator, field: str) -> str:
    try:
        validator(value)
    except ValidationError as exc:
        raise Invalid(exc.messages[0], extra={"errors": [{"field": field, "message": exc.messages[0]}]}) from None
    return value


def _snapshot(bmc: NodeBMC) -> dict:
    """What the audit trail keeps: where, and whether credentials are set (never what they are)."""
    return {
        "address": bmc.address,
        "mac": bmc.mac,
        "redfish_url": bmc.redfish_url,
        "system_path": bmc.system_path,
        "credentials_set": bmc.has_credentials,
        "credentials_changed_at": bmc.credentials_changed_at.isoformat() if bmc.credentials_changed_at else None,
        "tls": "pinned" if bmc.tls_pin_sha256 else ("own CA" if bmc.tls_ca_pem else "default"),
    }


def _clear_credentials(bmc: NodeBMC) -> None:
    bmc.username_encrypted = bmc.password_encrypted = bmc.credentials_origin = ""
    bmc.credentials_changed_at = timezone.now()


@transaction.atomic
def set_bmc(
    *,
    node: Node,
    redfish_url: str,
    system_path: str = "",
    username: str | None = None,
    password: str | None = None,
    actor: str,
    reason: str = "",
    address: str | None = None,
    mac: str | None = None,
    tls_ca_pem: str | None = None,
    tls_pin_sha256: str | None = None,
) -> NodeBMC:
    """Create or change a node's BMC record. Credentials change only when both are given (the
    forms never send the stored ones back). A new Redfish origin or TLS trust without new
    credentials clears the stored ones: they were entered for the old address and are never
    sent to another. `address` defaults to the URL's host; None leaves MAC and TLS as they are."""
    url = clean_redfish_url(redfish_url) if redfish_url else ""
    path = clean_system_path(system_path)
    if url:
        check_redfish_url(url)  # outside the management networks: refused, nothing contacted
    if (username is None) != (password is None) or (username is not None and not (username and password)):
        raise Invalid(
            "Give both the BMC username and password to change them, or neither to keep the stored ones.",
            extra={"errors": [{"field": "password", "message": "username and password together"}]},
        )
    if username is not None and (len(username) > MAX_SECRET_LENGTH or len(password) > MAX_SECRET_LENGTH):
        raise Invalid(f"BMC usernames and passwords are at most {MAX_SECRET_LENGTH} characters.")
    if username is not None and not url:
        raise Invalid("Credentials need the Redfish address they are for.")
    bmc = NodeBMC.objects.select_for_update().filter(node=node).first()
    created = bmc is None
    bmc = bmc or NodeBMC(node=node)
    before = None if created else _snapshot(bmc)
    old_trust = (origin_of(bmc.redfish_url) if bmc.redfish_url else "", bmc.tls_ca_pem, bmc.tls_pin_sha256)
    if address is None and url:
        address = urlsplit(url).hostname or ""
    if address is not None:
        address = address.strip()
        if address:
            _field(address, validate_bmc_address, "address")
            if not (url and address == urlsplit(url).hostname):  # the URL's own host was checked with it
                check_bmc_address(address)
        bmc.address = address
    if mac is not None:
        mac = mac.strip()
        bmc.mac = normalise_mac(_field(mac, validate_mac, "mac")) if mac else ""
    if tls_ca_pem is not None:
        bmc.tls_ca_pem = clean_ca_pem(tls_ca_pem)
    if tls_pin_sha256 is not None:
        bmc.tls_pin_sha256 = clean_pin(tls_pin_sha256)
    bmc.redfish_url, bmc.system_path = url, path
    new_trust = (origin_of(url) if url else "", bmc.tls_ca_pem, bmc.tls_pin_sha256)
    cleared = False
    if username is not None:
        bmc.username_encrypted, bmc.password_encrypted = encrypt(username), encrypt(password)
        bmc.credentials_changed_at = timezone.now()
        bmc.credentials_origin = new_trust[0]
    elif new_trust != old_trust and (bmc.username_encrypted or bmc.password_encrypted):
        _clear_credentials(bmc)  # entered for the old address (or the old trust): never sent to the new one
        cleared = True
    if created or before["redfish_url"] != url or before["system_path"] != path or username is not None or cleared:
        bmc.reachable, bmc.last_error, bmc.last_error_kind = None, "", ""  # a new address or login: judge afresh
    bmc.save()
    after = _snapshot(bmc)
    record_audit(
        actor=actor,
        action="node.bmc_set",
        target=node,
        before=before,
        after={**after, "credentials_cleared": cleared},
        reason=reason,
    )
    what = (
        "credentials changed"
        if username is not None
        else "address changed, credentials cleared (enter them for the new address)"
        if cleared
        else "address set"
    )
    record_node_event(node, actor=actor, action="bmc_set", reason=f"BMC {url}{path}: {what}. {reason}".strip())
    return bmc


@transaction.atomic
def rotate_bmc_credentials(*, actor: str, batch_size: int = 500) -> int:
    """Re-encrypt every stored credential under the first key of BMC_CREDENTIAL_KEY."""
    fernet = _fernet()
    rows = list(NodeBMC.objects.select_for_update().exclude(username_encrypted=""))
    for bmc in rows:
        bmc.username_encrypted = fernet.rotate(bmc.username_encrypted.encode()).decode()
        bmc.password_encrypted = fernet.rotate(bmc.password_encrypted.encode()).decode()
    NodeBMC.objects.bulk_update(rows, ["username_encrypted", "password_encrypted"], batch_size=batch_size)
    for bmc in rows[:1]:
        record_audit(actor=actor, action="bmc.rotate_credentials", target=bmc, after={"rotated": len(rows)})
    return len(rows)
