"""Idempotent creation (API.md, "Idempotent creation").

The unique (scope, key) row is inserted before the work starts, so concurrent retries are
settled by the database: one request does the work, the others get `409
idempotency_key_in_use` while it runs and the stored answer once it is done. A request
whose work fails leaves no record, so the client may retry with the same key.
"""
import hashlib
import json
import re
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.response import Response

from core.choices import IdempotencyState
from core.models import IdempotencyRecord

from .problems import Problem

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
_KEY_PATTERN = re.compile(r"^[\x21-\x7e][\x20-\x7e]{0,254}$")
# A record still "in progress" after this long belongs to a request that died; a retry takes over.
ABANDONED_AFTER = timedelta(minutes=2)
_STORED_HEADERS = ("Location",)


def request_digest(method: str, path: str, body) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{method} {path.rstrip('/')}\n{canonical}".encode()).hexdigest()


def read_key(request, *, required: bool = True) -> str | None:
    key = request.headers.get(HEADER)
    if key is None and not required:
        return None
    if key is None or not _KEY_PATTERN.match(key) or key != key.strip():
        raise Problem(400, "idempotency_key_missing",
                      f"Send an {HEADER} header of 1-255 printable characters (a UUID is a good choice) "
                      "so that retrying this request cannot create a second resource.")
    return key


def _replay(record: IdempotencyRecord) -> Response:
    headers = dict(record.response_headers or {})
    headers[REPLAYED_HEADER] = "true"
    return Response(record.response_body, status=record.response_status, headers=headers)


def idempotent_create(request, *, scope: str, key: str | None, perform: Callable[[], Response]) -> Response:
    """Run `perform` once per (scope, key); answer retries with the stored response."""
    if key is None:
        return perform()
    path = request.path.rstrip("/")
    digest = request_digest(request.method, path, request.data)
    try:
        with transaction.atomic():
            record = IdempotencyRecord.objects.create(
                scope=scope, key=key, method=request.method, path=path, body_digest=digest
            )
    except IntegrityError:
        with transaction.atomic():
            record = IdempotencyRecord.objects.select_for_update().get(scope=scope, key=key)
            if record.body_digest != digest:
                raise Problem(422, "idempotency_key_reused",
                              f"This {HEADER} was already used with a different request; use a new key for a new request.") from None
            if record.state == IdempotencyState.COMPLETED:
                return _replay(record)
            if record.created_at > timezone.now() - ABANDONED_AFTER:
                raise Problem(409, "idempotency_key_in_use",
                              "A request with this Idempotency-Key is still being processed; retry shortly.",
                              headers={"Retry-After": "1"}) from None
            record.created_at = timezone.now()
            record.save(update_fields=["created_at"])
    try:
        response = perform()
    except BaseException:
        IdempotencyRecord.objects.filter(pk=record.pk, state=IdempotencyState.IN_PROGRESS).delete()
        raise
    if response.status_code >= 400:
        IdempotencyRecord.objects.filter(pk=record.pk).delete()
        return response
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        state=IdempotencyState.COMPLETED,
        response_status=response.status_code,
        response_body=json.loads(json.dumps(response.data, default=str)),
        response_headers={h: response[h] for h in _STORED_HEADERS if response.has_header(h)},
        completed_at=timezone.now(),
    )
    return response


def purge_expired_keys() -> int:
    """Delete records older than the retention (at least 7 days, API.md)."""
    cutoff = timezone.now() - timedelta(days=settings.IDEMPOTENCY_KEY_TTL_DAYS)
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted
