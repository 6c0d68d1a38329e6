"""The notification delivery log in the operator API: every delivery with its attempts, and
the retry of a dead-lettered one (docs/notifications.md). Tenants see theirs through the tenant
API (tenants.api), which reuses the serializer below."""

from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.lookups import uuid_or_404
from core.api.pagination import paginate
from core.api.permissions import IsOperator
from core.api.problems import Problem
from core.api.schema import PAGE_PARAMETERS, READ_ERRORS, WRITE_ERRORS
from core.choices import DeliveryState
from core.models import DeliveryAttempt, OutboxDelivery
from core.outbox import describe_target, retry_delivery

TOPIC_MAX = 80


class DeliveryAttemptOut(serializers.ModelSerializer):
    class Meta:
        model = DeliveryAttempt
        fields = ["at", "ok", "status_code", "detail", "duration_ms"]


class DeliveryOut(serializers.ModelSerializer):
    event_id = serializers.UUIDField(source="event.id")
    topic = serializers.CharField(source="event.topic")
    dedup_key = serializers.CharField(source="event.dedup_key")
    destination = serializers.SerializerMethodField()
    attempt_log = DeliveryAttemptOut(many=True)

    class Meta:
        model = OutboxDelivery
        fields = [
            "id",
            "event_id",
            "topic",
            "dedup_key",
            "channel",
            "destination",
            "state",
            "attempts",
            "next_attempt_at",
            "last_error",
            "delivered_at",
            "created_at",
            "replay_of",
            "attempt_log",
        ]

    def get_destination(self, obj) -> str:
        return describe_target(obj)


def deliveries():
    return OutboxDelivery.objects.select_related("event").prefetch_related(
        Prefetch("attempt_log", queryset=DeliveryAttempt.objects.order_by("at", "id"))
    )


def filtered(queryset, params):
    """?state= and ?topic=, each checked: a bad filter is a 400, never an empty list."""
    state, topic = params.get("state") or "", params.get("topic") or ""
    if state:
        if state not in DeliveryState.values:
            raise Problem(
                400,
                "validation_error",
                f"state must be one of: {', '.join(DeliveryState.values)}.",
                errors=[{"field": "state", "message": "Unknown delivery state."}],
            )
        queryset = queryset.filter(state=state)
    if topic:
        if len(topic) > TOPIC_MAX:
            raise Problem(400, "validation_error", f"topic is at most {TOPIC_MAX} characters.")
        queryset = queryset.filter(event__topic=topic)
    return queryset, {"state": state, "topic": topic}


DELIVERY_PAGE = inline_serializer(
    "NotificationDeliveryPage",
    {"results": DeliveryOut(many=True), "next_page_token": serializers.CharField(allow_null=True)},
)
FILTERS = [
    OpenApiParameter("state", str, required=False, enum=DeliveryState.values),
    OpenApiParameter("topic", str, required=False),
]


class OpsDeliveryList(APIView):
    permission_classes = [IsAuthenticated, IsOperator]

    @extend_schema(
        operation_id="ops_notification_deliveries_list",
        parameters=[*PAGE_PARAMETERS, *FILTERS],
        responses={200: DELIVERY_PAGE, **READ_ERRORS},
        summary="The notification delivery log (pages, webhooks, e-mails), newest first",
    )
    def get(self, request):
        queryset, filters = filtered(deliveries(), request.query_params)
        page = paginate(queryset, request=request, scope="ops:deliveries", filters=filters)
        return Response({"results": DeliveryOut(page.results, many=True).data, "next_page_token": page.next_page_token})


class OpsDeliveryRetry(APIView):
    permission_classes = [IsAuthenticated, IsOperator]
    ops_action = "delivery.retry"

    @extend_schema(
        operation_id="ops_notification_delivery_retry",
        request=None,
        responses={200: DeliveryOut, **WRITE_ERRORS},
        summary="Retry a dead-lettered delivery (a fresh budget of attempts, due now)",
    )
    def post(self, request, pk):
        delivery = OutboxDelivery.objects.filter(pk=uuid_or_404(pk)).first()
        if delivery is None:
            raise Problem(
                404, "not_found", "No delivery with that id; list them at /api/v1/ops/notification-deliveries."
            )
        retry_delivery(delivery, actor=request.user.actor)
        return Response(DeliveryOut(deliveries().get(pk=delivery.pk)).data)
