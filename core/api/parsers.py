"""The API's JSON parser: DRF's, plus three refusals that would otherwise be 500s:
NUL characters (no text column can store them; PostgreSQL rejects them), nesting deeper than
settings.API_MAX_JSON_DEPTH, and bodies so deep that the decoder itself runs out of stack.
Each is a clear 400 problem."""

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError

from .problems import Problem


def _refusal(data, max_depth: int) -> str | None:
    """Why `data` is refused, walking it without recursion (so a deep body cannot overflow here)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return "nul"
            continue
        if isinstance(value, dict):
            children = [*value.keys(), *value.values()]
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > max_depth:
            return "depth"
        stack.extend((child, depth + 1) for child in children)
    return None


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        max_depth = settings.API_MAX_JSON_DEPTH
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON nested too deeply; at most {max_depth} levels.") from None
        refusal = _refusal(data, max_depth)
        if refusal == "nul":
            raise Problem(
                400,
                "validation_error",
                "Text may not contain NUL (\\u0000) characters; remove them and resend.",
                errors=[{"field": "body", "message": "contains a NUL character"}],
            )
        if refusal == "depth":
            raise ParseError(f"JSON nested too deeply; at most {max_depth} levels.")
        return data
