"""OpenAPI helpers shared by every API: the problem body, the error answers each route
documents, common parameters, and the bearer-token security schemes."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import serializers

from core.api.problems import PROBLEM_CONTENT_TYPE
from core.api.routes import AGENT_API_PREFIX


class FieldErrorSerializer(serializers.Serializer):
    field = serializers.CharField()
    message = serializers.CharField()


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details (docs/api.md, "Errors")."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    code = serializers.CharField()
    errors = FieldErrorSerializer(many=True, required=False)


def problems(*statuses: int) -> dict:
    return {(status, PROBLEM_CONTENT_TYPE): ProblemSerializer for status in statuses}


READ_ERRORS = problems(400, 401, 403, 404, 405, 406)
WRITE_ERRORS = problems(400, 401, 403, 404, 405, 406, 409, 415, 422)

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=True,
    description="1-255 printable characters; a retry with the same key and body gets the stored answer.",
)
OPTIONAL_IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description="optional here: cancelling is idempotent anyway.",
)
PAGE_PARAMETERS = [
    OpenApiParameter(
        "page_size",
        OpenApiTypes.INT,
        OpenApiParameter.QUERY,
        required=False,
        description="1-200 (default 50; larger values are lowered to 200)",
    ),
    OpenApiParameter(
        "page_token",
        OpenApiTypes.STR,
        OpenApiParameter.QUERY,
        required=False,
        description="the next_page_token of the previous page",
    ),
]


def page_of(serializer_class, name: str):
    """The schema of one keyset page of `serializer_class` rows (`core.api.pagination.paginate`)."""
    return inline_serializer(
        name=name,
        fields={"results": serializer_class(many=True), "next_page_token": serializers.CharField(allow_null=True)},
    )


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """Describes `Authorization: Bearer <token>` in the schema (tenant and operator tokens)."""

    target_class = "core.api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer"}


class AgentTokenScheme(OpenApiAuthenticationExtension):
    """Agent routes take only HMAC-signed agent tokens (`hga2.<node>.<key id>.<issued>.<signature>`);
    the ledger's variant (meter ingest, checked against the ledger's revocation list) is the same
    scheme on the wire."""

    target_class = "core.api.authentication.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "node agent token (manage.py create_token --agent HOST)",
        }


class LedgerAgentTokenScheme(AgentTokenScheme):
    """Meter ingest: the same agent token, its revocation checked in the ledger database."""

    target_class = "core.api.authentication.LedgerAgentTokenAuthentication"
    name = "agentTokenLedger"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "node agent token, revocation checked against the ledger's copy of the list",
        }


def strip_trailing_slashes(result, generator, request, public):
    """drf-spectacular postprocessing hook: paths are published as docs/api.md writes them, without a
    trailing slash (the server answers both forms)."""
    result["paths"] = {(path.rstrip("/") or "/"): item for path, item in result.get("paths", {}).items()}
    return result


# Swagger groups operations by tag; a route names none, its path decides (tenant, ops, agent,
# billing, planning), so the docs page is five groups instead of one list of every operation.
PLANNING_PATHS = ("/api/v1/ops/migration-plans", "/api/v1/ops/disposition-plans", "/api/v1/ops/capacity-plans")
BILLING_WORDS = ("invoice", "usage", "billing", "credit-note", "meter", "price", "dispute", "sla")


def tag_for_path(path: str) -> str:
    if path.startswith(AGENT_API_PREFIX):
        return "agent"
    if path.startswith(PLANNING_PATHS):
        return "planning"
    if any(word in path for word in BILLING_WORDS):
        return "billing"
    if path.startswith("/api/v1/ops/") or path.startswith("/metrics"):
        return "ops"
    return "tenant"


def tag_operations_by_area(result, generator, request, public):
    """drf-spectacular post-processing hook: every operation gets exactly one tag, its area, so
    Swagger shows five groups (tenant, ops, agent, billing, planning)."""
    for path, item in result.get("paths", {}).items():
        for operation in item.values():
            if isinstance(operation, dict) and "responses" in operation:
                operation["tags"] = [tag_for_path(path)]
    result["tags"] = [{"name": name} for name in ("tenant", "billing", "ops", "planning", "agent")]
    return result
