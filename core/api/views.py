"""Core's operator API: one search over every indexed identifier (docs/search.md)."""

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework.decorators import api_view, permission_classes
from rest_framework.response import Response

from core.search import search as search_index

from .permissions import IsOperator
from .schema import READ_ERRORS
from .serializers import SearchHitSerializer


@extend_schema(
    operation_id="ops_search",
    summary="Find objects by an identifier written on them",
    parameters=[
        OpenApiParameter(
            "q",
            str,
            required=True,
            description="an identifier or its first characters (≤ 200 characters); matched exactly and by prefix, "
            "case-insensitively; % and _ are literal",
        )
    ],
    responses={200: inline_serializer("SearchResults", {"results": SearchHitSerializer(many=True)}), **READ_ERRORS},
)
@api_view(["GET"])
@permission_classes([IsOperator])
def search(request):
    page = search_index(request.query_params.get("q"))
    hits = [{"kind": r.kind, "id": r.id, "label": r.label, "url": r.url, "match": r.match} for r in page.results]
    return Response({"results": SearchHitSerializer(hits, many=True).data})
