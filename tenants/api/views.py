"""Tenant API views (thin: selectors read, services write). Every lookup is scoped to the
caller's tenant, so another tenant's object is answered exactly like a missing one: 404."""

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.selectors import current_prices
from core.api.idempotency import idempotent_create, read_key
from core.api.lookups import parse_uuid, uuid_or_404
from core.api.pagination import paginate
from core.api.permissions import IsTenant
from core.api.problems import Problem
from core.api.schema import (
    IDEMPOTENCY_KEY,
    OPTIONAL_IDEMPOTENCY_KEY,
    PAGE_PARAMETERS,
    READ_ERRORS,
    WRITE_ERRORS,
)
from core.choices import TenantRole
from fleet.models import SoftwareBaseline
from tenants.selectors import (
    allocations_for,
    images,
    instance_types,
    partitions_for,
    quota_and_usage,
    ssh_keys_for,
    volumes_for,
)
from tenants.services.allocations import create_allocation, request_cancel
from tenants.services.partitions import PartitionExists, create_partition
from tenants.services.ssh_keys import create_ssh_key, delete_ssh_key
from tenants.services.volumes import attach_volume, create_volume, delete_volume

from . import serializers as s

ALLOCATION_PATH = "/api/v1/allocations/{}"


class TenantView(APIView):
    permission_classes = [IsTenant]

    @property
    def tenant(self):
        return self.request.user.tenant

    @property
    def scope(self) -> str:
        return self.request.user.idempotency_scope

    def page(self, queryset, serializer_class, *, filters: dict | None = None) -> Response:
        page = paginate(queryset, request=self.request, scope=self.scope, filters=filters)
        return Response(
            {"results": serializer_class(page.results, many=True).data, "next_page_token": page.next_page_token}
        )


def _valid(serializer_class, data):
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class InstanceTypeList(TenantView):
    @extend_schema(
        operation_id="instance_types_list",
        tags=["instance types"],
        responses={200: s.InstanceTypeListSerializer, **READ_ERRORS},
        description="What can be rented now, with the price per GPU-hour and the nodes free to place.",
    )
    def get(self, request):
        return Response(
            {
                "results": s.InstanceTypeSerializer(instance_types(current_prices()), many=True).data,
                "next_page_token": None,
            }
        )


class AllocationCollection(TenantView):
    @extend_schema(
        operation_id="allocations_list",
        tags=["allocations"],
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter("state", str, enum=[c for c, _ in s.AllocationState.choices], required=False),
        ],
        responses={200: s.AllocationListSerializer, **READ_ERRORS},
    )
    def get(self, request):
        filters = _valid(s.AllocationFilterSerializer, request.query_params)
        queryset = allocations_for(self.tenant)
        if "state" in filters:
            queryset = queryset.filter(state=filters["state"])
        return self.page(queryset, s.AllocationSerializer, filters=filters)

    @extend_schema(
        operation_id="allocations_create",
        tags=["allocations"],
        parameters=[IDEMPOTENCY_KEY],
        request=s.AllocationCreateSerializer,
        responses={202: s.AllocationSerializer, **WRITE_ERRORS},
        description="Ask for `node_count` whole nodes of one instance type; placed by the allocation loop.",
    )
    def post(self, request):
        key = read_key(request)

        def perform():
            data = _valid(s.AllocationCreateSerializer, request.data)
            keys = data.get("ssh_key_ids")
            allocation = create_allocation(
                tenant=self.tenant,
                name=data["name"],
                instance_type=data["instance_type"],
                node_count=data["node_count"],
                fabric=data["fabric"],
                actor=request.user.actor,
                idempotency_key=key,
                login_user=data["user"],
                image=_image(data.get("image")),
                ssh_keys=None if keys is None else _owned(ssh_keys_for(self.tenant), keys, "SSH key", "ssh-keys"),
                volumes=_owned(volumes_for(self.tenant), data.get("volume_ids") or [], "volume", "volumes"),
            )
            allocation = allocations_for(self.tenant).get(pk=allocation.pk)
            return Response(
                s.AllocationSerializer(allocation).data,
                status=202,
                headers={"Location": ALLOCATION_PATH.format(allocation.pk)},
            )

        return idempotent_create(request, scope=self.scope, key=key, perform=perform)


def _owned(queryset, ids: list[str], what: str, collection: str) -> list:
    """The caller's own objects with these ids; any other id (another tenant's, unknown, not a
    UUID) is a 404 that names it, and nothing is created."""
    wanted = {}
    for raw in ids:
        pk = parse_uuid(raw)
        if pk is None:
            raise Problem(404, "not_found", f"No such {what}: {raw!r}. GET /api/v1/{collection} lists yours.")
        wanted[pk] = raw
    found = {obj.pk: obj for obj in queryset.filter(pk__in=list(wanted))}
    for pk, raw in wanted.items():
        if pk not in found:
            raise Problem(404, "not_found", f"No such {what}: {raw}. GET /api/v1/{collection} lists yours.")
    return [found[pk] for pk in wanted]


def _image(raw: str | None):
    if not raw:
        return None
    pk = parse_uuid(raw)
    image = SoftwareBaseline.objects.filter(pk=pk, golden=True).first() if pk else None
    if image is None:
        raise Problem(404, "not_found", f"No such image: {raw}. GET /api/v1/images lists them.")
    return image


class AllocationDetail(TenantView):
    @extend_schema(
        operation_id="allocations_retrieve",
        tags=["allocations"],
        responses={200: s.AllocationSerializer, **READ_ERRORS},
    )
    def get(self, request, pk):
        allocation = allocations_for(self.tenant).filter(pk=uuid_or_404(pk)).first()
        if allocation is None:
            raise Http404
        return Response(s.AllocationSerializer(allocation).data)


class AllocationCancel(TenantView):
    @extend_schema(
        operation_id="allocations_cancel",
        tags=["allocations"],
        parameters=[OPTIONAL_IDEMPOTENCY_KEY],
        request=None,
        responses={200: s.AllocationSerializer, 202: s.AllocationSerializer, **WRITE_ERRORS},
        description="Record the intent to cancel (202); a terminal allocation answers 200 unchanged.",
    )
    def post(self, request, pk):
        allocation = allocations_for(self.tenant).filter(pk=uuid_or_404(pk)).first()
        if allocation is None:
            raise Http404
        key = read_key(request, required=False)

        def perform():
            cancelled, terminal = request_cancel(allocation=allocation, actor=request.user.actor)
            fresh = allocations_for(self.tenant).get(pk=cancelled.pk)
            return Response(s.AllocationSerializer(fresh).data, status=200 if terminal else 202)

        return idempotent_create(request, scope=self.scope, key=key, perform=perform)


class FabricPartitionCollection(TenantView):
    @extend_schema(
        operation_id="fabric_partitions_list",
        tags=["fabric partitions"],
        parameters=PAGE_PARAMETERS,
        responses={200: s.FabricPartitionListSerializer, **READ_ERRORS},
    )
    def get(self, request):
        return self.page(partitions_for(self.tenant), s.FabricPartitionSerializer)

    @extend_schema(
        operation_id="fabric_partitions_create",
        tags=["fabric partitions"],
        parameters=[IDEMPOTENCY_KEY],
        request=s.FabricPartitionCreateSerializer,
        responses={201: s.FabricPartitionSerializer, **WRITE_ERRORS},
        description="Your partition in one fabric domain (one per domain; isolated allocations use it).",
    )
    def post(self, request):
        key = read_key(request)

        def perform():
            data = _valid(s.FabricPartitionCreateSerializer, request.data)
            try:
                partition = create_partition(
                    tenant=self.tenant,
                    fabric_domain=data["fabric_domain"],
                    name=data["name"],
                    actor=request.user.actor,
                    idempotency_key=key,
                )
            except PartitionExists as exists:
                raise Problem(
                    409,
                    "partition_exists",
                    f"You already have partition {exists.partition.pk} in {data['fabric_domain'].name}; "
                    "use it (GET /api/v1/fabric-partitions).",
                ) from None
            return Response(
                s.FabricPartitionSerializer(partition).data,
                status=201,
                headers={"Location": f"/api/v1/fabric-partitions/{partition.pk}"},
            )

        return idempotent_create(request, scope=self.scope, key=key, perform=perform)


class FabricPartitionDetail(TenantView):
    @extend_schema(
        operation_id="fabric_partitions_retrieve",
        tags=["fabric partitions"],
        responses={200: s.FabricPartitionSerializer, **READ_ERRORS},
    )
    def get(self, request, pk):
        partition = partitions_for(self.tenant).filter(pk=uuid_or_404(pk)).first()
        if partition is None:
            raise Http404
        return Response(s.FabricPartitionSerializer(partition).data)


class VolumeCollection(TenantView):
    @extend_schema(
        operation_id="volumes_list",
        tags=["volumes"],
        parameters=PAGE_PARAMETERS,
        responses={200: s.VolumeListSerializer, **READ_ERRORS},
    )
    def get(self, request):
        return self.page(volumes_for(self.tenant), s.VolumeSerializer)

    @extend_schema(
        operation_id="volumes_create",
        tags=["volumes"],
        parameters=[IDEMPOTENCY_KEY],
        request=s.VolumeCreateSerializer,
        responses={201: s.VolumeSerializer, **WRITE_ERRORS},
        description="A volume, exported only to your own partition (another tenant's id is 404).",
    )
    def post(self, request):
        key = read_key(request)

        def perform():
            data = _valid(s.VolumeCreateSerializer, request.data)
            partition = None
            if data.get("export_partition"):
                partition = (
                    partitions_for(self.tenant).filter(pk=parse_uuid(data["export_partition"])).first()
                    if parse_uuid(data["export_partition"])
                    else None
                )
                if partition is None:
                    raise Problem(
                        404, "not_found", "No such fabric partition. GET /api/v1/fabric-partitions lists yours."
                    )
            volume = create_volume(
                tenant=self.tenant,
                name=data["name"],
                size_gb=data["size_gb"],
                export_partition=partition,
                actor=request.user.actor,
                idempotency_key=key,
            )
            return Response(
                s.VolumeSerializer(volume).data, status=201, headers={"Location": f"/api/v1/volumes/{volume.pk}"}
            )

        return idempotent_create(request, scope=self.scope, key=key, perform=perform)


class VolumeDetail(TenantView):
    @extend_schema(
        operation_id="volumes_retrieve", tags=["volumes"], responses={200: s.VolumeSerializer, **READ_ERRORS}
    )
    def get(self, request, pk):
        volume = volumes_for(self.tenant).filter(pk=uuid_or_404(pk)).first()
        if volume is None:
            raise Http404
        return Response(s.VolumeSerializer(volume).data)

    @extend_schema(
        operation_id="volumes_destroy",
        tags=["volumes"],
        responses={204: None, **WRITE_ERRORS},
        description=(
            "Delete the volume and its data for good (tenant admin tokens only); its size leaves your storage "
            "quota. While an allocation that has not ended mounts it: 409 `volume_attached` naming them."
        ),
    )
    def delete(self, request, pk):
        volume = volumes_for(self.tenant).filter(pk=uuid_or_404(pk)).first()
        if volume is None:
            raise Http404
        if request.user.role != TenantRole.ADMIN:
            raise Problem(403, "forbidden", "Only a tenant admin token deletes volumes (their data is gone for good).")
        delete_volume(volume=volume, actor=request.user.actor)
        return Response(status=204)


class AllocationVolumes(TenantView):
    @extend_schema(
        operation_id="allocations_volumes_attach",
        tags=["allocations"],
        parameters=[OPTIONAL_IDEMPOTENCY_KEY],
        request=s.VolumeAttachSerializer,
        responses={200: s.AllocationSerializer, 202: s.AllocationSerializer, **WRITE_ERRORS},
        description="Attach one of your volumes: every node mounts it (202); already attached: 200.",
    )
    def post(self, request, pk):
        allocation = allocations_for(self.tenant).filter(pk=uuid_or_404(pk)).first()
        if allocation is None:
            raise Http404
        key = read_key(request, required=False)

        def perform():
            data = _valid(s.VolumeAttachSerializer, request.data)
            (volume,) = _owned(volumes_for(self.tenant), [data["volume_id"]], "volume", "volumes")
            attached = attach_volume(allocation=allocation, volume=volume, actor=request.user.actor)
            fresh = allocations_for(self.tenant).get(pk=allocation.pk)
            return Response(s.AllocationSerializer(fresh).data, status=202 if attached else 200)

        return idempotent_create(request, scope=self.scope, key=key, perform=perform)


class SshKeyCollection(TenantView):
    @extend_schema(
        operation_id="ssh_keys_list",
        tags=["ssh keys"],
        parameters=PAGE_PARAMETERS,
        responses={200: s.SshKeyListSerializer, **READ_ERRORS},
    )
    def get(self, request):
        return self.page(ssh_keys_for(self.tenant), s.SshKeySerializer)

    @extend_schema(
        operation_id="ssh_keys_create",
        tags=["ssh keys"],
        parameters=[IDEMPOTENCY_KEY],
        request=s.SshKeyCreateSerializer,
        responses={201: s.SshKeySerializer, **WRITE_ERRORS},
        description="Register a public key (Ed25519, ECDSA, RSA >= 3072 bits); the same key twice is 409.",
    )
    def post(self, request):
        key = read_key(request)

        def perform():
            data = _valid(s.SshKeyCreateSerializer, request.data)
            ssh_key = create_ssh_key(
                tenant=self.tenant,
                name=data["name"],
                public_key=data["public_key"],
                actor=request.user.actor,
                idempotency_key=key,
            )
            return Response(
                s.SshKeySerializer(ssh_key).data, status=201, headers={"Location": f"/api/v1/ssh-keys/{ssh_key.pk}"}
            )

        return idempotent_create(request, scope=self.scope, key=key, perform=perform)


class SshKeyDetail(TenantView):
    @extend_schema(
        operation_id="ssh_keys_retrieve", tags=["ssh keys"], responses={200: s.SshKeySerializer, **READ_ERRORS}
    )
    def get(self, request, pk):
        ssh_key = ssh_keys_for(self.tenant).filter(pk=uuid_or_404(pk)).first()
        if ssh_key is None:
            raise Http404
        return Response(s.SshKeySerializer(ssh_key).data)

    @extend_schema(
        operation_id="ssh_keys_destroy",
        tags=["ssh keys"],
        responses={204: None, **WRITE_ERRORS},
        description="Delete the key; it leaves every live allocation's nodes within a minute.",
    )
    def delete(self, request, pk):
        ssh_key = ssh_keys_for(self.tenant).filter(pk=uuid_or_404(pk)).first()
        if ssh_key is None:
            raise Http404
        delete_ssh_key(key=ssh_key, actor=request.user.actor)
        return Response(status=204)


class ImageList(TenantView):
    @extend_schema(
        operation_id="images_list",
        tags=["images"],
        responses={200: s.ImageListSerializer, **READ_ERRORS},
        description="The images you may choose: each instance type's golden software baseline.",
    )
    def get(self, request):
        return Response({"results": s.ImageSerializer(images(), many=True).data, "next_page_token": None})


class CurrentTenant(TenantView):
    @extend_schema(operation_id="tenant_retrieve", tags=["tenant"], responses={200: s.TenantSerializer, **READ_ERRORS})
    def get(self, request):
        quota, usage = quota_and_usage(self.tenant)
        return Response(
            s.TenantSerializer(
                {
                    "id": self.tenant.pk,
                    "slug": self.tenant.slug,
                    "name": self.tenant.name,
                    "quota": quota,
                    "usage_now": usage,
                }
            ).data
        )
