"""An allocation's life: creation (quota, capacity), its own transition table, cancellation intent.

`transition_allocation()` is the only way an allocation's `state` changes.
"""

from datetime import timedelta

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from core.errors import Invalid, Refused
from core.services.audit import record_audit
from fleet.models import NodeType, SoftwareBaseline
from tenants.choices import TERMINAL_ALLOCATION_STATES, FabricMode
from tenants.choices import AllocationState as S
from tenants.models import Allocation, Quota, SshKey, Tenant, Volume
from tenants.notifications import emit_tenant_event
from tenants.services.access import current_access
from tenants.services.placement import InsufficientCapacity, domain_can_hold
from tenants.services.volumes import check_export_partitions

ALLOCATION_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.PROVISIONING, S.CANCELLED, S.FAILED}),
    S.PROVISIONING: frozenset({S.ACTIVE, S.RELEASING, S.FAILED}),
    S.ACTIVE: frozenset({S.RELEASING}),
    S.RELEASING: frozenset({S.RELEASED, S.CANCELLED}),
    S.RELEASED: frozenset(),
    S.CANCELLED: frozenset(),
    S.FAILED: frozenset(),
}

# How long an allocation may wait in a state before the loop fails it.
PENDING_TIMEOUT = timedelta(minutes=10)
# Nodes get 15 min to provision (fleet STATE_TIMEOUTS); the allocation waits a little longer so
# the node's own deadline fires first.
PROVISIONING_TIMEOUT = timedelta(minutes=20)
STATE_TIMEOUTS = {S.PENDING: PENDING_TIMEOUT, S.PROVISIONING: PROVISIONING_TIMEOUT}


class QuotaExceeded(Refused):
    """The tenant would hold more nodes of a generation than its quota allows."""

    code = "quota_exceeded"


class InvalidAllocationTransition(Exception):
    pass


def _snapshot(allocation: Allocation) -> dict:
    return {
        "state": allocation.state,
        "degraded": allocation.degraded,
        "cancel_requested_at": allocation.cancel_requested_at.isoformat() if allocation.cancel_requested_at else None,
    }


@transaction.atomic
def transition_allocation(
    allocation: Allocation, to_state: str, *, actor: str, reason: str = "", failure_reason: str = ""
) -> Allocation:
    """Move one allocation along the table with a compare-and-set UPDATE; audited."""
    from_state = allocation.state
    if to_state not in ALLOCATION_TRANSITIONS[from_state]:
        raise InvalidAllocationTransition(f"allocation {allocation.pk} is {from_state}; it cannot go to {to_state}")
    now = timezone.now()
    timeout = STATE_TIMEOUTS.get(to_state)
    updates = {"state": to_state, "updated_at": now, "state_deadline": now + timeout if timeout else None}
    if to_state == S.ACTIVE and allocation.activated_at is None:
        updates["activated_at"] = now
    if to_state in TERMINAL_ALLOCATION_STATES:
        updates["ended_at"] = now
    if failure_reason:
        updates["failure_reason"] = failure_reason
    if not Allocation.objects.filter(pk=allocation.pk, state=from_state).update(**updates):
        raise InvalidAllocationTransition(f"allocation {allocation.pk} changed state concurrently")
    before = _snapshot(allocation)
    for field, value in updates.items():
        setattr(allocation, field, value)
    record_audit(
        actor=actor,
        action=f"allocation.{to_state}",
        target=allocation,
        before=before,
        after=_snapshot(allocation),
        reason=reason or failure_reason,
    )
    if to_state in (S.ACTIVE, S.RELEASED):  # the tenant hears it (tenants.notifications)
        emit_tenant_event(
            tenant_id=allocation.tenant_id,
            event_type=f"allocation.{to_state}",
            dedup_key=f"allocation:{allocation.pk}:{to_state}",
            data=allocation_event_data(allocation),
            now=now,
        )
    return allocation


def allocation_event_data(allocation: Allocation, **extra) -> dict:
    """What a tenant's webhook says about an allocation (ids opaque, times UTC)."""
    return {
        "allocation": str(allocation.pk),
        "name": allocation.name,
        "state": allocation.state,
        "degraded": allocation.degraded,
        "node_count": allocation.node_count,
        **extra,
    }


def quota_for(tenant: Tenant, generation: str) -> int:
    return Quota.objects.filter(tenant=tenant, generation=generation).values_list("max_nodes", flat=True).first() or 0


def nodes_held(tenant: Tenant, generation: str) -> int:
    return (
        Allocation.objects.filter(tenant=tenant, instance_type__generation=generation)
        .exclude(state__in=TERMINAL_ALLOCATION_STATES)
        .aggregate(n=Sum("node_count"))["n"]
        or 0
    )


@transaction.atomic
def create_allocation(
    *,
    tenant: Tenant,
    name: str,
    instance_type: NodeType,
    node_count: int,
    fabric: str,
    actor: str,
    idempotency_key: str = "",
    login_user: str = "ubuntu",
    image: SoftwareBaseline | None = None,
    ssh_keys: list[SshKey] | None = None,
    volumes: list[Volume] | None = None,
) -> Allocation:
    """A pending allocation, after the quota and a capacity check now.

    `ssh_keys` None: every key of the tenant, now and later; a list: exactly those. `image`
    None: the instance type's golden baseline (if it has one). Keys and volumes must be the
    tenant's own (callers look them up within the tenant; this guards the invariant itself).
    The tenant row is locked so concurrent creates cannot both squeeze under the quota.
    """
    if any(k.tenant_id != tenant.pk for k in ssh_keys or ()) or any(v.tenant_id != tenant.pk for v in volumes or ()):
        raise ValueError("an allocation carries only its own tenant's keys and volumes")
    if image is None:
        image = SoftwareBaseline.objects.filter(node_type=instance_type, golden=True).first()
    elif image.node_type_id != instance_type.pk or not image.golden:
        raise Invalid(
            f"image {image.pk} is not offered for {instance_type.slug}; GET /api/v1/images lists each type's image",
            extra={"errors": [{"field": "image", "message": f"not an image of {instance_type.slug}"}]},
        )
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
    generation = instance_type.generation
    limit = quota_for(tenant, generation)
    held = nodes_held(tenant, generation)
    if held + node_count > limit:
        raise QuotaExceeded(
            f"Your quota is {limit} {generation} node(s) at once and {held} are held; "
            f"ask for at most {max(limit - held, 0)} or cancel an allocation first."
        )
    if not domain_can_hold(instance_type=instance_type, node_count=node_count):
        raise InsufficientCapacity(
            f"No single fabric domain has {node_count} free {instance_type.slug} node(s) now; "
            "ask for fewer nodes or retry later (GET /api/v1/instance-types shows availability)."
        )
    allocation = Allocation.objects.create(
        tenant=tenant,
        name=name,
        instance_type=instance_type,
        node_count=node_count,
        fabric=fabric or FabricMode.ISOLATED,
        idempotency_key=idempotency_key,
        state_deadline=timezone.now() + PENDING_TIMEOUT,
        login_user=login_user,
        image=image,
        all_ssh_keys=ssh_keys is None,
    )
    if ssh_keys:
        allocation.ssh_keys.set(ssh_keys)
    if volumes:
        # Locked so a concurrent delete of one of them waits and then sees this allocation.
        volumes = list(
            Volume.objects.select_for_update(of=("self",))
            .select_related("export_partition")
            .filter(pk__in=[v.pk for v in volumes])
        )
        check_export_partitions(allocation, volumes)
        # Its volumes' partition ties it to one fabric domain: say now if that one cannot hold it.
        partition = next((v.export_partition for v in volumes if v.export_partition_id), None)
        if partition is not None and not domain_can_hold(
            instance_type=instance_type, node_count=node_count, fabric_domain_id=partition.fabric_domain_id
        ):
            raise InsufficientCapacity(
                f"Volume partition {partition.name} is in fabric domain {partition.fabric_domain.name}, which has "
                f"fewer than {node_count} free {instance_type.slug} node(s) now; the allocation must be placed there "
                "to reach the volume. Ask for fewer nodes, use a volume without an export partition, or retry later."
            )
        allocation.volumes.set(volumes)
    spec = current_access(allocation)
    record_audit(
        actor=actor,
        action="allocation.create",
        target=allocation,
        after={
            "instance_type": instance_type.slug,
            "node_count": node_count,
            "fabric": allocation.fabric,
            "user": login_user,
            "image": str(image.pk) if image else None,
            "ssh_keys": [k["fingerprint"] for k in spec["keys"]],
            "all_ssh_keys": ssh_keys is None,
            "volumes": [m["volume_id"] for m in spec["mounts"]],
        },
    )
    return allocation


@transaction.atomic
def request_cancel(*, allocation: Allocation, actor: str, reason: str = "") -> tuple[Allocation, bool]:
    """Record the intent to cancel (idempotent). Returns (allocation, terminal_already)."""
    locked = Allocation.objects.select_for_update().get(pk=allocation.pk)
    if locked.state in TERMINAL_ALLOCATION_STATES:
        return locked, True
    if locked.cancel_requested_at is None:
        before = _snapshot(locked)
        locked.cancel_requested_at = timezone.now()
        locked.save(update_fields=["cancel_requested_at", "updated_at"])
        record_audit(
            actor=actor,
            action="allocation.cancel_requested",
            target=locked,
            before=before,
            after=_snapshot(locked),
            reason=reason,
        )
    return locked, False
