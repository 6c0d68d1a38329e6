"""Inbound webhooks from paging tools: PagerDuty V3 acknowledgements and resolutions
(docs/notifications.md, "PagerDuty back to Hangar"). No bearer token: the body's HMAC signature
is the credential, so a bad one counts toward the address's failed-authentication budget."""

import json

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.problems import Problem
from core.api.throttles import note_failed_authentication, refuse_if_too_many_failed_authentications
from health.services.pagerduty_inbound import (
    MAX_BODY_BYTES,
    BadPagerDutyEvent,
    UnknownIncident,
    apply_event,
    signature_valid,
)

APPLIED = {"acknowledged", "resolved", "unchanged"}


class PagerDutyWebhook(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="hooks_pagerduty",
        request=None,
        responses={
            200: inline_serializer(
                "PagerDutyHookResult",
                {
                    "result": serializers.CharField(),
                    "detail": serializers.CharField(),
                    "incident": serializers.CharField(),
                },
            ),
            202: OpenApiResponse(description="Not Hangar's incident, or an event type Hangar does not read: ignored"),
            401: OpenApiResponse(description="pagerduty_signature_invalid"),
            404: OpenApiResponse(description="pagerduty_incident_unknown"),
            413: OpenApiResponse(description="payload_too_large"),
            503: OpenApiResponse(description="pagerduty_hook_off"),
        },
        summary="PagerDuty V3 webhook: incident.acknowledged / incident.resolved, signed (X-PagerDuty-Signature)",
        tags=["hooks"],
    )
    def post(self, request):
        secrets = settings.PAGERDUTY_WEBHOOK_SECRETS
        if not secrets:
            raise Problem(
                503,
                "pagerduty_hook_off",
                "No PagerDuty webhook secret is configured (PAGERDUTY_WEBHOOK_SECRETS); nothing was read.",
            )
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > MAX_BODY_BYTES:
            raise Problem(
                413,
                "payload_too_large",
                f"The body is {length} bytes; a PagerDuty event is at most {MAX_BODY_BYTES}.",
                extra={"limit_bytes": MAX_BODY_BYTES},
            )
        refuse_if_too_many_failed_authentications(request)
        body = request.body
        if len(body) > MAX_BODY_BYTES:
            raise Problem(413, "payload_too_large", f"A PagerDuty event is at most {MAX_BODY_BYTES} bytes.")
        if not signature_valid(body, request.headers.get("X-PagerDuty-Signature", ""), secrets):
            note_failed_authentication(request)
            raise Problem(
                401,
                "pagerduty_signature_invalid",
                "X-PagerDuty-Signature carries no v1 signature of this body under a configured secret.",
            )
        try:
            document = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise Problem(400, "parse_error", "The body is not JSON.") from None
        try:
            outcome = apply_event(document)
        except UnknownIncident as exc:
            raise Problem(404, exc.code, str(exc)) from None
        except BadPagerDutyEvent as exc:
            raise Problem(400, "validation_error", str(exc)) from None
        return Response(
            {
                "result": outcome.result,
                "detail": outcome.detail,
                "incident": str(outcome.incident.pk) if outcome.incident else None,
            },
            status=200 if outcome.result in APPLIED else 202,
        )
