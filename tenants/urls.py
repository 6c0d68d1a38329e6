"""Console pages of the tenants app: the tenant portal and the operator's tenant list."""

from django.urls import path

from . import views

app_name = "tenants"

urlpatterns = [
    path("portal/", views.portal, name="portal"),
    path("portal/allocations/", views.portal_allocations, name="portal-allocations"),
    path("portal/allocations/", views.portal_allocations, name="portal-create"),
    path("portal/tokens/", views.portal_tokens, name="portal-tokens"),
    path("portal/notifications/", views.portal_notifications, name="portal-notifications"),
    path("portal/ssh-keys/", views.portal_ssh_keys, name="portal-ssh-keys"),
    path("portal/ssh-keys/<str:pk>/delete/", views.portal_delete_ssh_key, name="portal-ssh-key-delete"),
    path("portal/volumes/<str:pk>/delete/", views.portal_delete_volume, name="portal-volume-delete"),
    path("portal/allocations/<str:pk>/cancel/", views.portal_cancel_allocation, name="portal-cancel"),
    path("tenants/", views.tenant_list, name="tenant-list"),
]
