"""The API's JSON parser: DRF's, plus three refusals that would otherwise be 500s:
NUL characters (no text column can store them; PostgreSQL rejects them), nesting deeper than
settings.API_MAX_JSON_DEPTH, and bodies so deep that the decoder itself runs out of stack.
Each is a clear 400 problem.

The walk over the parsed body is skipped when the text shows it cannot refuse: a NUL can only
arrive as the escape `\\u0000` (the decoder rejects raw control characters), and a body with
no more `{` and `[` than the depth limit cannot nest deeper. A heartbeat (8 GPUs, ~250 values)
then pays two substring scans instead of the walk.
"""

import io

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import get_encoding

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
        raw = stream.read()
        try:
            data = super().parse(io.BytesIO(raw), media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON nested too deeply; at most {max_depth} levels.") from None
        text = raw.decode(get_encoding(parser_context or {}), errors="replace")
        if "\\u0000" not in text and text.count("{") + text.count("[") <= max_depth:
            return data
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
