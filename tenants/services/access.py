"""What a tenant gets on every node of an allocation: the login user, the SSH public keys, the
image (a golden software baseline) and the volumes to mount, as one spec with a revision.

The spec travels to the node's agent in the `provision` work item and in desired-state
(`access`); when it changes on a live allocation (a key added or deleted, a volume attached) the
allocation's `access_revision` changes and its running nodes get a `sync_access` work item. The
agent reports the revision it applied with the facts it checked; the allocation loop records it
per node (`AllocationNode.access_revision`, `ready_at`, `ready_facts`) and queues `sync_access`
again for any running node that has not confirmed the current revision.
"""

import hashlib
import json
from collections import defaultdict

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from fleet.choices import AgentAction, AgentActionState, Lifecycle
from fleet.models import NodeAgentAction
from fleet.services.agent_work import request_agent_actions
from tenants.choices import AllocationState
from tenants.models import Allocation, AllocationNode, SshKey, Tenant

ACTOR = "system:access"
MOUNT_ROOT = "/mnt/volumes"
# Where the storage service exports a volume (NFSv4, one directory per volume).
DEFAULT_VOLUME_EXPORT = "storage.hangar.internal:/volumes"
LIVE_STATES = (AllocationState.PROVISIONING, AllocationState.ACTIVE)
# Node states in which the agent holds the tenant's access and can apply a change.
RUNNING_NODE_STATES = (Lifecycle.PROVISIONING, Lifecycle.ACTIVE)
DELIVERING_ACTIONS = (AgentAction.PROVISION, AgentAction.SYNC_ACCESS)


def volume_export_base() -> str:
    return getattr(settings, "VOLUME_EXPORT_BASE", DEFAULT_VOLUME_EXPORT)


def _keys_of(allocation: Allocation) -> list[SshKey]:
    if allocation.all_ssh_keys:
        keys = SshKey.objects.filter(tenant_id=allocation.tenant_id)
    else:
        keys = allocation.ssh_keys.all()
    return sorted(keys, key=lambda k: k.fingerprint)


def access_spec(allocation: Allocation) -> dict:
    """The spec (public keys only), without reading any node: 2-3 queries."""
    image = allocation.image
    volumes = sorted(allocation.volumes.all(), key=lambda v: str(v.pk))
    base = volume_export_base()
    spec = {
        "allocation_id": str(allocation.pk),
        "user": allocation.login_user,
        "keys": [
            {"id": str(k.pk), "fingerprint": k.fingerprint, "public_key": k.public_key} for k in _keys_of(allocation)
        ],
        "image": (
            {"id": str(image.pk), "name": image.name, "versions": dict(sorted(image.versions.items()))}
            if image is not None
            else None
        ),
        "mounts": [
            {
                "volume_id": str(v.pk),
                "path": f"{MOUNT_ROOT}/{v.pk}",
                "source": f"{base}/{allocation.tenant_id}/{v.pk}",
                "fstype": "nfs4",
                "size_gb": v.size_gb,
            }
            for v in volumes
        ],
    }
    spec["revision"] = revision_of(spec)
    return spec


def revision_of(spec: dict) -> str:
    body = {k: v for k, v in spec.items() if k != "revision"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


@transaction.atomic
def refresh_access(allocations, *, reason: str) -> int:
    """Recompute the access of live allocations; those whose spec changed get the new revision
    and a `sync_access` for every running node (one already pending picks up the new spec:
    the agent applies what desired-state says when it runs it). Returns how many changed."""
    changed = 0
    for allocation in allocations:
        if allocation.state not in LIVE_STATES and allocation.state != AllocationState.PENDING:
            continue
        spec = access_spec(allocation)
        if spec["revision"] == allocation.access_revision:
            continue
        Allocation.objects.filter(pk=allocation.pk).update(access_revision=spec["revision"], updated_at=timezone.now())
        allocation.access_revision = spec["revision"]
        changed += 1
        if allocation.state in LIVE_STATES:  # a pending one has no node yet; placement sends the spec
            _queue_sync(allocation, spec["revision"], reason)
    return changed


def _queue_sync(allocation: Allocation, revision: str, reason: str) -> int:
    members = AllocationNode.objects.filter(
        allocation=allocation, ended_at__isnull=True, node__lifecycle__in=RUNNING_NODE_STATES
    ).select_related("node")
    return request_agent_actions(
        nodes=[m.node for m in members],
        action=AgentAction.SYNC_ACCESS,
        actor=ACTOR,
        params={"allocation_id": str(allocation.pk), "revision": revision},
        reason=reason,
    )


def live_allocations_following(tenant: Tenant, key: SshKey | None = None):
    """Pending and live allocations whose access includes the tenant's keys (all, or `key`)."""
    qs = Allocation.objects.filter(tenant=tenant, state__in=(AllocationState.PENDING, *LIVE_STATES))
    cond = Q(all_ssh_keys=True)
    if key is not None:
        cond |= Q(ssh_keys=key)
    return list(qs.filter(cond).distinct().select_related("image"))


def record_confirmations(*, limit: int = 2000) -> int:
    """Live memberships whose node has not confirmed the allocation's current access: read the
    newest succeeded `provision`/`sync_access` of that node for that allocation and record what
    it says it applied (revision, facts, when it was first ready). Running nodes still behind
    with nothing pending get a `sync_access`. Returns how many memberships were updated."""
    behind = list(
        AllocationNode.objects.filter(ended_at__isnull=True, allocation__state__in=LIVE_STATES)
        .exclude(access_revision=F("allocation__access_revision"), ready_at__isnull=False)
        .select_related("allocation", "node")[:limit]
    )
    if not behind:
        return 0
    started = min(m.started_at for m in behind)
    results: dict = defaultdict(list)
    pending: set = set()
    for row in NodeAgentAction.objects.filter(
        node_id__in=[m.node_id for m in behind],
        action__in=DELIVERING_ACTIONS,
        created_at__gte=started,
        state__in=(AgentActionState.SUCCEEDED, AgentActionState.PENDING),
    ).only("node_id", "state", "params", "output", "finished_at", "created_at"):
        if row.state == AgentActionState.PENDING:
            pending.add(row.node_id)
        else:
            results[row.node_id].append(row)
    updated = 0
    resync: dict = defaultdict(list)
    for m in behind:
        mine = [
            r
            for r in results[m.node_id]
            if r.created_at >= m.started_at
            and str((r.output or {}).get("access", {}).get("allocation_id") or r.params.get("allocation_id"))
            == str(m.allocation_id)
            and (r.output or {}).get("ready") is True
        ]
        if mine:
            newest = max(mine, key=lambda r: (r.finished_at or r.created_at, str(r.pk)))
            access = (newest.output or {}).get("access") or {}
            changes = {}
            revision = str(access.get("revision") or "")[:64]
            if revision and revision != m.access_revision:
                changes["access_revision"] = revision
            if m.ready_at is None:
                changes["ready_at"] = newest.finished_at or timezone.now()
            facts = (newest.output or {}).get("facts")
            if isinstance(facts, dict) and facts != m.ready_facts:
                changes["ready_facts"] = facts
            if changes:
                AllocationNode.objects.filter(pk=m.pk).update(**changes)
                for k, v in changes.items():
                    setattr(m, k, v)
                updated += 1
        if (
            m.ready_at is not None
            and m.access_revision != m.allocation.access_revision
            and m.node.lifecycle == Lifecycle.ACTIVE
            and m.node_id not in pending
        ):
            resync[m.allocation].append(m.node)
    for allocation, nodes in resync.items():
        request_agent_actions(
            nodes=nodes,
            action=AgentAction.SYNC_ACCESS,
            actor=ACTOR,
            params={"allocation_id": str(allocation.pk), "revision": allocation.access_revision},
            reason="the node has not confirmed the allocation's current access",
        )
    return updated


def current_access(allocation: Allocation) -> dict:
    """The spec now, storing its revision on the allocation when it moved (placement calls this
    before it hands the spec to the agents)."""
    spec = access_spec(allocation)
    if spec["revision"] != allocation.access_revision:
        Allocation.objects.filter(pk=allocation.pk).update(access_revision=spec["revision"])
        allocation.access_revision = spec["revision"]
    return spec


def cancel_access_syncs(node_ids, reason: str) -> int:
    """Nodes leaving an allocation: a `sync_access` still pending is void (the next tenancy
    queues its own)."""
    return NodeAgentAction.objects.filter(
        node_id__in=list(node_ids), action=AgentAction.SYNC_ACCESS, state=AgentActionState.PENDING
    ).update(state=AgentActionState.CANCELLED, finished_at=timezone.now(), detail=f"cancelled: {reason}"[:2000])
