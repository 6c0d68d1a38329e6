"""Tenant API: webhook endpoints, e-mail recipients, the delivery log and replay (docs/api.md,
"Webhooks"). Tenant admins only; every lookup is scoped to the caller's tenant, so another
tenant's endpoint or delivery is 404 exactly like a missing one."""

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from core.api.lookups import uuid_or_404
from core.api.notifications import DeliveryOut, deliveries, filtered
from core.api.pagination import paginate
from core.api.problems import Problem
from core.api.schema import PAGE_PARAMETERS, READ_ERRORS, WRITE_ERRORS
from core.choices import TenantRole
from tenants.models import EmailRecipient, WebhookEndpoint
from tenants.notifications import EVENT_TYPES
from tenants.services import notification_endpoints as service

from .views import TenantView


class EndpointOut(serializers.ModelSerializer):
    class Meta:
        model = WebhookEndpoint
        fields = ["id", "url", "event_types", "description", "enabled", "created_at", "updated_at"]


class EndpointCreated(EndpointOut):
    class Meta(EndpointOut.Meta):
        fields = [*EndpointOut.Meta.fields, "secret"]


class EndpointIn(serializers.Serializer):
    url = serializers.CharField(max_length=500)
    event_types = serializers.ListField(
        child=serializers.ChoiceField(choices=list(EVENT_TYPES)), min_length=1, max_length=len(EVENT_TYPES)
    )
    description = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class EndpointPatch(serializers.Serializer):
    url = serializers.CharField(max_length=500, required=False)
    event_types = serializers.ListField(
        child=serializers.ChoiceField(choices=list(EVENT_TYPES)),
        min_length=1,
        max_length=len(EVENT_TYPES),
        required=False,
    )
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)


class RecipientOut(serializers.ModelSerializer):
    class Meta:
        model = EmailRecipient
        fields = ["id", "email", "event_types", "enabled", "created_at"]


class RecipientIn(serializers.Serializer):
    email = serializers.EmailField(max_length=254)
    event_types = serializers.ListField(
        child=serializers.ChoiceField(choices=list(EVENT_TYPES)), min_length=1, max_length=len(EVENT_TYPES)
    )


def _page(name, serializer):
    return inline_serializer(
        name, {"results": serializer(many=True), "next_page_token": serializers.CharField(allow_null=True)}
    )


class AdminView(TenantView):
    """Notification settings carry signing secrets and say where a tenant's data goes: admins only."""

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if request.user.role != TenantRole.ADMIN:
            raise Problem(403, "forbidden", "Only a tenant admin token manages notifications and sees their log.")

    def valid(self, serializer_class):
        body = serializer_class(data=self.request.data)
        body.is_valid(raise_exception=True)
        return body.validated_data


class EndpointCollection(AdminView):
    @extend_schema(
        operation_id="webhook_endpoints_list",
        tags=["notifications"],
        parameters=PAGE_PARAMETERS,
        responses={200: _page("WebhookEndpointPage", EndpointOut), **READ_ERRORS},
    )
    def get(self, request):
        return self.page(WebhookEndpoint.objects.filter(tenant=self.tenant), EndpointOut)

    @extend_schema(
        operation_id="webhook_endpoints_create",
        tags=["notifications"],
        request=EndpointIn,
        responses={201: EndpointCreated, **WRITE_ERRORS},
        description="An HTTPS endpoint receiving the chosen event types, signed with the secret returned once, here.",
    )
    def post(self, request):
        data = self.valid(EndpointIn)
        endpoint = service.create_endpoint(tenant=self.tenant, actor=request.user.actor, **data)
        return Response(
            EndpointCreated(endpoint).data, status=201, headers={"Location": f"/api/v1/webhook-endpoints/{endpoint.pk}"}
        )


class EndpointDetail(AdminView):
    def _endpoint(self, pk) -> WebhookEndpoint:
        endpoint = WebhookEndpoint.objects.filter(tenant=self.tenant, pk=uuid_or_404(pk)).first()
        if endpoint is None:
            raise Problem(404, "not_found", "No webhook endpoint with that id; GET /api/v1/webhook-endpoints.")
        return endpoint

    @extend_schema(
        operation_id="webhook_endpoints_retrieve", tags=["notifications"], responses={200: EndpointOut, **READ_ERRORS}
    )
    def get(self, request, pk):
        return Response(EndpointOut(self._endpoint(pk)).data)

    @extend_schema(
        operation_id="webhook_endpoints_update",
        tags=["notifications"],
        request=EndpointPatch,
        responses={200: EndpointOut, **WRITE_ERRORS},
    )
    def patch(self, request, pk):
        endpoint = self._endpoint(pk)
        data = self.valid(EndpointPatch)
        return Response(EndpointOut(service.update_endpoint(endpoint=endpoint, actor=request.user.actor, **data)).data)

    @extend_schema(
        operation_id="webhook_endpoints_destroy", tags=["notifications"], responses={204: None, **WRITE_ERRORS}
    )
    def delete(self, request, pk):
        service.delete_endpoint(endpoint=self._endpoint(pk), actor=request.user.actor)
        return Response(status=204)


class RecipientCollection(AdminView):
    @extend_schema(
        operation_id="notification_recipients_list",
        tags=["notifications"],
        parameters=PAGE_PARAMETERS,
        responses={200: _page("NotificationRecipientPage", RecipientOut), **READ_ERRORS},
    )
    def get(self, request):
        return self.page(EmailRecipient.objects.filter(tenant=self.tenant), RecipientOut)

    @extend_schema(
        operation_id="notification_recipients_create",
        tags=["notifications"],
        request=RecipientIn,
        responses={201: RecipientOut, **WRITE_ERRORS},
    )
    def post(self, request):
        data = self.valid(RecipientIn)
        recipient = service.add_recipient(tenant=self.tenant, actor=request.user.actor, **data)
        return Response(RecipientOut(recipient).data, status=201)


class RecipientDetail(AdminView):
    @extend_schema(
        operation_id="notification_recipients_destroy", tags=["notifications"], responses={204: None, **WRITE_ERRORS}
    )
    def delete(self, request, pk):
        recipient = EmailRecipient.objects.filter(tenant=self.tenant, pk=uuid_or_404(pk)).first()
        if recipient is None:
            raise Problem(404, "not_found", "No recipient with that id; GET /api/v1/notification-recipients.")
        service.remove_recipient(recipient=recipient, actor=request.user.actor)
        return Response(status=204)


class DeliveryList(AdminView):
    @extend_schema(
        operation_id="notification_deliveries_list",
        tags=["notifications"],
        parameters=PAGE_PARAMETERS,
        responses={200: _page("TenantDeliveryPage", DeliveryOut), **READ_ERRORS},
        description="Every delivery of your events to your endpoints and recipients, with each attempt.",
    )
    def get(self, request):
        queryset = deliveries().filter(pk__in=service.tenant_deliveries(self.tenant).values("pk"))
        queryset, filters = filtered(queryset, request.query_params)
        page = paginate(queryset, request=request, scope=self.scope, filters=filters)
        return Response({"results": DeliveryOut(page.results, many=True).data, "next_page_token": page.next_page_token})


class DeliveryReplay(AdminView):
    @extend_schema(
        operation_id="notification_deliveries_replay",
        tags=["notifications"],
        request=None,
        responses={201: DeliveryOut, **WRITE_ERRORS},
        description="Send the event again to the same endpoint: a new delivery with the identical body.",
    )
    def post(self, request, pk):
        replay = service.replay_tenant_delivery(
            tenant=self.tenant, delivery_id=uuid_or_404(pk), actor=request.user.actor
        )
        return Response(DeliveryOut(deliveries().get(pk=replay.pk)).data, status=201)
