"""A tenant's SSH public keys: register (parsed and validated, within the tenant's key quota,
duplicates refused) and delete (the key leaves every live allocation's nodes)."""

from django.db import IntegrityError, transaction

from core.errors import Conflict, Invalid, Refused
from core.services.audit import record_audit
from tenants.models import SshKey, Tenant
from tenants.services.access import live_allocations_following, refresh_access
from tenants.ssh_keys import InvalidSshKey, parse_public_key


class SshKeyQuotaExceeded(Refused):
    code = "quota_exceeded"


class SshKeyExists(Conflict):
    code = "ssh_key_exists"


def _snapshot(key: SshKey) -> dict:
    return {"name": key.name, "key_type": key.key_type, "bits": key.bits, "fingerprint": key.fingerprint}


@transaction.atomic
def create_ssh_key(*, tenant: Tenant, name: str, public_key: str, actor: str, idempotency_key: str = "") -> SshKey:
    try:
        parsed = parse_public_key(public_key)
    except InvalidSshKey as bad:
        raise Invalid(str(bad), extra={"errors": [{"field": "public_key", "message": str(bad)}]}) from None
    # The tenant row is locked so concurrent registrations cannot both squeeze under the quota.
    locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
    held = SshKey.objects.filter(tenant=tenant).count()
    if held >= locked.max_ssh_keys:
        raise SshKeyQuotaExceeded(
            f"You may register {locked.max_ssh_keys} SSH key(s) and hold {held}; delete one you no longer use.",
            extra={"quota": {"max_ssh_keys": locked.max_ssh_keys, "ssh_keys": held}},
        )
    existing = SshKey.objects.filter(tenant=tenant, fingerprint=parsed.fingerprint).first()
    if existing is not None:
        raise SshKeyExists(
            f"This key is already registered as {existing.name!r} ({existing.fingerprint}), id {existing.pk}.",
            extra={"ssh_key_id": str(existing.pk)},
        )
    try:
        with transaction.atomic():
            key = SshKey.objects.create(
                tenant=tenant,
                name=name,
                key_type=parsed.key_type,
                bits=parsed.bits,
                public_key=parsed.public_key,
                fingerprint=parsed.fingerprint,
                idempotency_key=idempotency_key,
            )
    except IntegrityError:  # a concurrent registration of the same key won
        raise SshKeyExists(f"This key ({parsed.fingerprint}) is already registered.") from None
    record_audit(actor=actor, action="ssh_key.create", target=key, after=_snapshot(key))
    refresh_access(live_allocations_following(tenant), reason=f"SSH key {key.fingerprint} added")
    return key


@transaction.atomic
def delete_ssh_key(*, key: SshKey, actor: str) -> int:
    """Delete the key; every live allocation that carried it gets a new access revision and its
    running nodes a `sync_access`. Returns how many allocations changed."""
    tenant = key.tenant
    affected = live_allocations_following(tenant, key)
    before = _snapshot(key)
    record_audit(
        actor=actor,
        action="ssh_key.delete",
        target=key,
        before=before,
        reason=f"removed from {len(affected)} live allocation(s)",
    )
    key.delete()
    return refresh_access(affected, reason=f"SSH key {before['fingerprint']} deleted")
