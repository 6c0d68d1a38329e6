"""The API's JSON parser: DRF's, plus refusing NUL characters, which no text column can store
(PostgreSQL rejects them), so such input is a clear 400 instead of a database error."""
from rest_framework import parsers

from .problems import Problem


def _has_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        if _has_nul(data):
            raise Problem(400, "validation_error", "Text may not contain NUL (\\u0000) characters; remove them and resend.",
                          errors=[{"field": "body", "message": "contains a NUL character"}])
        return data
