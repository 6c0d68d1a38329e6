"""Tenant API routes (/api/v1/, docs/api.md "Tenant API")."""

from core.api.routes import api_route

from . import notification_views as nv
from . import views

urlpatterns = [
    api_route("instance-types", views.InstanceTypeList.as_view(), "instance-types"),
    api_route("allocations", views.AllocationCollection.as_view(), "allocations"),
    api_route(r"allocations/(?P<pk>[^/]+)/cancel", views.AllocationCancel.as_view(), "allocation-cancel"),
    api_route(r"allocations/(?P<pk>[^/]+)/volumes", views.AllocationVolumes.as_view(), "allocation-volumes"),
    api_route(r"allocations/(?P<pk>[^/]+)", views.AllocationDetail.as_view(), "allocation-detail"),
    api_route("fabric-partitions", views.FabricPartitionCollection.as_view(), "fabric-partitions"),
    api_route(r"fabric-partitions/(?P<pk>[^/]+)", views.FabricPartitionDetail.as_view(), "fabric-partition-detail"),
    api_route("volumes", views.VolumeCollection.as_view(), "volumes"),
    api_route(r"volumes/(?P<pk>[^/]+)", views.VolumeDetail.as_view(), "volume-detail"),
    api_route("ssh-keys", views.SshKeyCollection.as_view(), "ssh-keys"),
    api_route(r"ssh-keys/(?P<pk>[^/]+)", views.SshKeyDetail.as_view(), "ssh-key-detail"),
    api_route("images", views.ImageList.as_view(), "images"),
    api_route("tenant", views.CurrentTenant.as_view(), "tenant"),
    api_route("webhook-endpoints", nv.EndpointCollection.as_view(), "webhook-endpoints"),
    api_route(r"webhook-endpoints/(?P<pk>[^/]+)", nv.EndpointDetail.as_view(), "webhook-endpoint-detail"),
    api_route("notification-recipients", nv.RecipientCollection.as_view(), "notification-recipients"),
    api_route(r"notification-recipients/(?P<pk>[^/]+)", nv.RecipientDetail.as_view(), "notification-recipient-detail"),
    api_route("notification-deliveries", nv.DeliveryList.as_view(), "notification-deliveries"),
    api_route(
        r"notification-deliveries/(?P<pk>[^/]+)/replay", nv.DeliveryReplay.as_view(), "notification-delivery-replay"
    ),
]
