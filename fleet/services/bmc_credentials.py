"""BMC records and their credentials: encrypted at rest with Fernet under BMC_CREDENTIAL_KEY
(never SECRET_KEY), written only here, audited without the secret, never read back for people.

The key setting may list several comma-separated keys: the first encrypts, any decrypts
(`MultiFernet`), so a key is rotated by putting the new one first and running
`rotate_bmc_credentials()` before the old one is dropped.
"""

from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import Invalid
from core.services.audit import record_audit
from fleet.models import Node, NodeBMC

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
    """What the Redfish client needs to reach one system, decrypted for the call only."""

    url: str
    system_path: str
    username: str
    password: str
    verify: bool | str = True

    def __repr__(self) -> str:  # never print the password in a traceback or log
        return f"Target(url={self.url!r}, system_path={self.system_path!r}, username=<hidden>)"


def verify_setting() -> bool | str:
    value = settings.BMC_VERIFY_TLS.strip()
    if value.lower() in ("true", "1", "yes", ""):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    return value  # a CA bundle path


def target_for(bmc: NodeBMC) -> Target:
    if not bmc.has_credentials:
        raise CredentialsUnreadable(f"No BMC credentials are stored for {bmc.node}; enter them on the BMC record.")
    return Target(
        url=bmc.redfish_url.rstrip("/"),
        system_path=bmc.system_path,
        username=decrypt(bmc.username_encrypted),
        password=decrypt(bmc.password_encrypted),
        verify=verify_setting(),
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


def _snapshot(bmc: NodeBMC) -> dict:
    """What the audit trail keeps: where, and whether credentials are set (never what they are)."""
    return {
        "redfish_url": bmc.redfish_url,
        "system_path": bmc.system_path,
        "credentials_set": bmc.has_credentials,
        "credentials_changed_at": bmc.credentials_changed_at.isoformat() if bmc.credentials_changed_at else None,
    }


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
) -> NodeBMC:
    """Create or change a node's BMC record. Credentials change only when both are given (the
    forms never send the stored ones back); an address change keeps the stored credentials."""
    url = clean_redfish_url(redfish_url)
    path = clean_system_path(system_path)
    if (username is None) != (password is None) or (username is not None and not (username and password)):
        raise Invalid(
            "Give both the BMC username and password to change them, or neither to keep the stored ones.",
            extra={"errors": [{"field": "password", "message": "username and password together"}]},
        )
    if username is not None and (len(username) > MAX_SECRET_LENGTH or len(password) > MAX_SECRET_LENGTH):
        raise Invalid(f"BMC usernames and passwords are at most {MAX_SECRET_LENGTH} characters.")
    bmc = NodeBMC.objects.select_for_update().filter(node=node).first()
    created = bmc is None
    bmc = bmc or NodeBMC(node=node)
    before = None if created else _snapshot(bmc)
    bmc.redfish_url, bmc.system_path = url, path
    if username is not None:
        bmc.username_encrypted, bmc.password_encrypted = encrypt(username), encrypt(password)
        bmc.credentials_changed_at = timezone.now()
    if created or before["redfish_url"] != url or before["system_path"] != path or username is not None:
        bmc.reachable, bmc.last_error, bmc.last_error_kind = None, "", ""  # a new address or login: judge afresh
    bmc.save()
    after = _snapshot(bmc)
    record_audit(actor=actor, action="node.bmc_set", target=node, before=before, after=after, reason=reason)
    what = "credentials changed" if username is not None else "address set"
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
