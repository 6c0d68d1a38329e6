"""Tenant portal and the operator's tenant list (thin: selectors read, services write).

The portal acts for the signed-in user's tenant (their Membership); every object is looked up
within that tenant, so another tenant's id is a 404. Viewers see but cannot create or cancel.
"""

import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from billing.selectors import current_prices
from core.api.lookups import parse_uuid, uuid_or_404
from core.choices import ApiTokenKind, TenantRole
from core.decorators import operator_required
from core.errors import DomainError
from core.models import ApiToken
from core.outbox import describe_target
from core.services.audit import actor_label
from fleet.models import SoftwareBaseline
from health.selectors import affected_tenant_slugs

from .api.serializers import AllocationCreateSerializer, SshKeyCreateSerializer
from .models import EmailRecipient, Membership, WebhookEndpoint
from .notifications import EVENT_TYPES
from .selectors import (
    allocations_for,
    images,
    instance_types,
    live_allocations_with_key,
    partitions_for,
    quota_and_usage,
    ssh_keys_for,
    tenants_with_usage,
    volumes_for,
)
from .services import notification_endpoints as notification_service
from .services.allocations import create_allocation, request_cancel
from .services.ssh_keys import create_ssh_key, delete_ssh_key
from .services.volumes import delete_volume

PORTAL_ROWS = 100


def _membership(request) -> Membership:
    membership = Membership.objects.select_related("tenant").filter(user=request.user).order_by("tenant__slug").first()
    if membership is None:
        # A 403 page (templates/403.html) that names where this account can go instead.
        raise PermissionDenied(
            "The portal shows one tenant's allocations, usage and invoices, and this account is not a "
            "member of any tenant. Ask a tenant admin to add you."
        )
    return membership


@login_required
def portal(request):
    membership = _membership(request)
    tenant = membership.tenant
    quota, usage = quota_and_usage(tenant)
    return render(
        request,
        "tenants/portal.html",
        {
            "nav": "portal",
            "portal_nav": "overview",
            "tenant": tenant,
            "can_write": membership.role != TenantRole.VIEWER,
            "is_admin": membership.role == TenantRole.ADMIN,
            "allocations": allocations_for(tenant)[:PORTAL_ROWS],
            "partitions": partitions_for(tenant)[:PORTAL_ROWS],
            "volumes": volumes_for(tenant)[:PORTAL_ROWS],
            "instance_types": instance_types(current_prices()),
            "images": images(),
            "quota": sorted((gen, quota[gen], usage.get(gen, 0)) for gen in quota),
            "form_key": uuid.uuid4(),
        },
    )


@login_required
def portal_allocations(request):
    """GET: every allocation of the tenant with its nodes; POST: request a new one."""
    if request.method == "POST":
        return portal_create_allocation(request)
    membership = _membership(request)
    return render(
        request,
        "tenants/portal_allocations.html",
        {
            "nav": "portal",
            "portal_nav": "allocations",
            "tenant": membership.tenant,
            "can_write": membership.role != TenantRole.VIEWER,
            "allocations": allocations_for(membership.tenant)[:PORTAL_ROWS],
        },
    )


@login_required
def portal_tokens(request):
    """The tenant's API tokens (prefix, role, last use); the plain value is never stored."""
    membership = _membership(request)
    tokens = ApiToken.objects.filter(kind=ApiTokenKind.TENANT, tenant=membership.tenant).order_by("-created_at")
    return render(
        request,
        "tenants/portal_tokens.html",
        {"nav": "portal", "portal_nav": "tokens", "tenant": membership.tenant, "tokens": tokens[:PORTAL_ROWS]},
    )


@login_required
@require_http_methods(["GET", "POST"])
def portal_ssh_keys(request):
    """The tenant's SSH keys; POST registers one (members and admins)."""
    membership = _membership(request)
    can_write = membership.role != TenantRole.VIEWER
    if request.method == "POST":
        if not can_write:
            return HttpResponseForbidden("Viewers may not register SSH keys.")
        form = SshKeyCreateSerializer(data=request.POST)
        key = f"portal:{request.POST.get('form_key', '')}"[:255]
        if not form.is_valid():
            for field, errors in form.errors.items():
                messages.error(request, f"{field}: {' '.join(str(e) for e in errors)}")
        elif not ssh_keys_for(membership.tenant).filter(idempotency_key=key).exists():
            try:
                created = create_ssh_key(
                    tenant=membership.tenant,
                    name=form.validated_data["name"],
                    public_key=form.validated_data["public_key"],
                    actor=actor_label(request.user),
                    idempotency_key=key,
                )
            except DomainError as refusal:
                messages.error(request, refusal.detail)
            else:
                messages.success(request, f"SSH key {created.name} registered ({created.fingerprint}).")
        return redirect("tenants:portal-ssh-keys")
    return render(
        request,
        "tenants/portal_ssh_keys.html",
        {
            "nav": "portal",
            "portal_nav": "ssh_keys",
            "tenant": membership.tenant,
            "can_write": can_write,
            "keys": ssh_keys_for(membership.tenant)[:PORTAL_ROWS],
            "form_key": uuid.uuid4(),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def portal_delete_ssh_key(request, pk):
    """GET: which live allocations the key stops opening; POST: delete it."""
    membership = _membership(request)
    if membership.role == TenantRole.VIEWER:
        return HttpResponseForbidden("Viewers may not delete SSH keys.")
    key = ssh_keys_for(membership.tenant).filter(pk=uuid_or_404(pk)).first()
    if key is None:
        raise Http404("No such SSH key.")
    if request.method == "GET":
        return render(
            request,
            "tenants/portal_ssh_key_delete.html",
            {
                "nav": "portal",
                "portal_nav": "ssh_keys",
                "tenant": membership.tenant,
                "key": key,
                "allocations": live_allocations_with_key(key),
            },
        )
    delete_ssh_key(key=key, actor=actor_label(request.user))
    messages.success(request, f"SSH key {key.name} deleted; live nodes drop it within a minute.")
    return redirect("tenants:portal-ssh-keys")


@login_required
@require_POST
def portal_delete_volume(request, pk):
    """Delete a volume and its data (tenant admins; the button asks first and names it). Refused,
    naming them, while an allocation that has not ended mounts it."""
    membership = _membership(request)
    if membership.role != TenantRole.ADMIN:
        return HttpResponseForbidden("Only a tenant admin deletes volumes.")
    volume = volumes_for(membership.tenant).filter(pk=uuid_or_404(pk)).first()
    if volume is None:
        raise Http404("No such volume.")
    try:
        delete_volume(volume=volume, actor=actor_label(request.user))
    except DomainError as refusal:
        messages.error(request, refusal.detail)
    else:
        messages.success(request, f"Volume {volume.name} deleted with its data; {volume.size_gb} GB of quota freed.")
    return redirect("tenants:portal")


@login_required
@require_POST
def portal_create_allocation(request):
    membership = _membership(request)
    if membership.role == TenantRole.VIEWER:
        return HttpResponseForbidden("Viewers may not create allocations.")
    form = AllocationCreateSerializer(data=request.POST)
    if not form.is_valid():
        for field, errors in form.errors.items():
            messages.error(request, f"{field}: {' '.join(str(e) for e in errors)}")
        return redirect("tenants:portal")
    data = form.validated_data
    # A double-submitted form carries the same key: the second submit finds the allocation.
    key = f"portal:{request.POST.get('form_key', '')}"[:255]
    if allocations_for(membership.tenant).filter(idempotency_key=key).exists():
        return redirect("tenants:portal")
    wanted = {parse_uuid(v) for v in data.get("volume_ids") or []}
    volumes = list(volumes_for(membership.tenant).filter(pk__in=[v for v in wanted if v]))
    image = None
    if data.get("image"):
        image = SoftwareBaseline.objects.filter(pk=parse_uuid(data["image"]), golden=True).first()
    if len(volumes) != len(wanted) or (data.get("image") and image is None):
        messages.error(request, "No such volume or image; choose from the lists.")
        return redirect("tenants:portal")
    try:
        allocation = create_allocation(
            tenant=membership.tenant,
            name=data["name"],
            instance_type=data["instance_type"],
            node_count=data["node_count"],
            fabric=data["fabric"],
            actor=actor_label(request.user),
            idempotency_key=key,
            login_user=data["user"],
            image=image,
            volumes=volumes,
        )
    except DomainError as refusal:
        messages.error(request, refusal.detail)
        return redirect("tenants:portal")
    messages.success(request, f"Allocation {allocation.name} requested; it is placed within seconds.")
    return redirect("tenants:portal")


@login_required
@require_http_methods(["GET", "POST"])
def portal_cancel_allocation(request, pk):
    """GET: what cancelling stops (its nodes and GPUs, billed until they stop); POST: do it."""
    membership = _membership(request)
    if membership.role == TenantRole.VIEWER:
        return HttpResponseForbidden("Viewers may not cancel allocations.")
    allocation = allocations_for(membership.tenant).filter(pk=uuid_or_404(pk)).first()
    if allocation is None:
        raise Http404("No such allocation.")
    if request.method == "GET":
        nodes = allocation.live_members
        return render(
            request,
            "tenants/portal_cancel.html",
            {
                "nav": "portal",
                "portal_nav": "allocations",
                "tenant": membership.tenant,
                "allocation": allocation,
                "nodes": nodes,
                "gpus": sum(m.node.node_type.gpus_per_node for m in nodes),
            },
        )
    request_cancel(allocation=allocation, actor=actor_label(request.user))
    messages.success(request, f"Cancellation of {allocation.name} recorded; nodes are stopped and wiped next.")
    return redirect("tenants:portal")


@operator_required
def tenant_list(request):
    """Every tenant; `?affected=1`: only those an open incident affects (the overview's tile)."""
    affected = affected_tenant_slugs()
    rows = tenants_with_usage()
    only_affected = request.GET.get("affected") == "1"
    if only_affected:
        rows = [row for row in rows if row["tenant"].slug in affected]
    return render(
        request,
        "tenants/tenant_list.html",
        {"nav": "tenants", "rows": rows, "affected": set(affected), "only_affected": only_affected},
    )


@login_required
@require_http_methods(["GET", "POST"])
def portal_notifications(request):
    """Webhook endpoints, e-mail recipients and the delivery log; tenant admins only (the same
    services as the API). A new endpoint's signing secret is shown once, on this answer."""
    membership = _membership(request)
    if membership.role != TenantRole.ADMIN:
        raise PermissionDenied("Notifications are managed by the tenant's admins; ask one of them.")
    tenant, actor = membership.tenant, actor_label(request.user)
    error, secret = "", ""
    if request.method == "POST":
        do = request.POST.get("do", "")
        types = [t for t in request.POST.getlist("event_types") if t in EVENT_TYPES][: len(EVENT_TYPES)]
        try:
            if do == "add_endpoint":
                endpoint = notification_service.create_endpoint(
                    tenant=tenant, url=request.POST.get("url", "")[:600], event_types=types, actor=actor
                )
                secret = endpoint.secret
            elif do == "add_recipient":
                notification_service.add_recipient(
                    tenant=tenant, email=request.POST.get("email", "")[:300], event_types=types, actor=actor
                )
            elif do == "remove_endpoint":
                endpoint = WebhookEndpoint.objects.filter(tenant=tenant, pk=uuid_or_404(request.POST.get("id"))).first()
                if endpoint is None:
                    raise Http404("No such endpoint.")
                notification_service.delete_endpoint(endpoint=endpoint, actor=actor)
            elif do == "remove_recipient":
                recipient = EmailRecipient.objects.filter(tenant=tenant, pk=uuid_or_404(request.POST.get("id"))).first()
                if recipient is None:
                    raise Http404("No such recipient.")
                notification_service.remove_recipient(recipient=recipient, actor=actor)
            elif do == "replay":
                notification_service.replay_tenant_delivery(
                    tenant=tenant, delivery_id=uuid_or_404(request.POST.get("id")), actor=actor
                )
            else:
                error = "Unknown action."
        except DomainError as exc:
            error = exc.detail
        if not error and not secret:
            return redirect("tenants:portal-notifications")
    deliveries = list(
        notification_service.tenant_deliveries(tenant)
        .select_related("event")
        .prefetch_related("attempt_log")
        .order_by("-created_at", "-id")[:PORTAL_ROWS]
    )
    return render(
        request,
        "tenants/portal_notifications.html",
        {
            "nav": "portal",
            "portal_nav": "notifications",
            "tenant": tenant,
            "endpoints": WebhookEndpoint.objects.filter(tenant=tenant),
            "recipients": EmailRecipient.objects.filter(tenant=tenant),
            "deliveries": [(d, describe_target(d)) for d in deliveries],
            "event_types": EVENT_TYPES.items(),
            "error": error,
            "secret": secret,
        },
        status=400 if error else 200,
    )
