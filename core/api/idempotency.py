"""Idempotent creation (docs/api.md, "Idempotent creation").

The unique (scope, key) row, the work and the stored answer are one transaction, so a crash
at any point cannot leave a resource without its record (the duplicate a retry used to
create) nor a record without its resource. Concurrent retries are settled by the database:
one request does the work, the others wait on the unique index and get the stored answer.
A request whose work fails leaves no record, so the client may retry with the same key.
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
from core.faults import fault_point
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
        raise Problem(
            400,
            "idempotency_key_missing",
            f"Send an {HEADER} header of 1-255 printable characters (a UUID is a good choice) "
            "so that retrying this request cannot create a second resource.",
        )
    return key


def _replay(record: IdempotencyRecord) -> Response:
    headers = dict(record.response_headers or {})
    headers[REPLAYED_HEADER] = "true"
    return Response(record.response_body, status=record.response_status, headers=headers)


def idempotent_create(request, *, scope: str, key: str | None, perform: Callable[[], Response]) -> Response:
    """Run `perform` once per (scope, key); answer retries with the stored response.

    The record, the work and the stored answer commit in ONE transaction: a process killed
    anywhere in between leaves neither the resource nor the record, so the retry does the work
    once; a process that got past the commit left both, so the retry gets the stored answer.
    A concurrent request with the same key waits on the record's unique index until the first
    commits (then replays) or rolls back (then does the work itself).
    """
    if key is None:
        return perform()
    path = request.path.rstrip("/")
    digest = request_digest(request.method, path, request.data)
    stored = _stored_answer(scope, key, digest)
    if stored is not None:
        return stored
    try:
        with transaction.atomic():
            record = IdempotencyRecord.objects.create(
                scope=scope, key=key, method=request.method, path=path, body_digest=digest
            )
            response = perform()
            if response.status_code >= 400:
                transaction.set_rollback(True)  # a refused request leaves nothing: the client may retry
                return response
            fault_point("idempotency.after_perform")
            IdempotencyRecord.objects.filter(pk=record.pk).update(
                state=IdempotencyState.COMPLETED,
                response_status=response.status_code,
                response_body=json.loads(json.dumps(response.data, default=str)),
                response_headers={h: response[h] for h in _STORED_HEADERS if response.has_header(h)},
                completed_at=timezone.now(),
            )
            fault_point("idempotency.before_commit")
    except IntegrityError:
        # Another request with this key committed first (or a constraint of the work itself
        # failed): the stored answer, if there is one, is the answer.
        stored = _stored_answer(scope, key, digest)
        if stored is None:
            raise
        return stored
    return response


def _stored_answer(scope: str, key: str, digest: str) -> Response | None:
    """The committed answer for (scope, key), or None if there is none to give (yet)."""
    with transaction.atomic():
        record = IdempotencyRecord.objects.select_for_update().filter(scope=scope, key=key).first()
        if record is None:
            return None
        if record.body_digest != digest:
            raise Problem(
                422,
                "idempotency_key_reused",
                f"This {HEADER} was already used with a different request; use a new key for a new request.",
            )
        if record.state == IdempotencyState.COMPLETED:
            return _replay(record)
        # An in-progress row can only be left by a version that committed the record before the
        # work; a young one may still be running, an old one belongs to a request that died.
        if record.created_at > timezone.now() - ABANDONED_AFTER:
            raise Problem(
                409,
                "idempotency_key_in_use",
                "A request with this Idempotency-Key is still being processed; retry shortly.",
                headers={"Retry-After": "1"},
            )
        record.delete()
        return None


def purge_expired_keys() -> int:
    """Delete records older than the retention (at least 7 days, docs/api.md)."""
    cutoff = timezone.now() - timedelta(days=settings.IDEMPOTENCY_KEY_TTL_DAYS)
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted
