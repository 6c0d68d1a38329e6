"""A previewed workbook kept on disk between the preview and the confirm, claimable once by
the user who staged it, swept after its time to live."""

import datetime
import json
import os
import secrets
import time
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from fleet.inventory_files import Sheet, Workbook


def _staging_dir() -> Path:
    path = Path(settings.VAR_DIR) / "admin-imports"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cell_json(value):
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def stage_workbook(*, workbook: Workbook, filename: str, user_id, options: dict, expected: dict | None = None) -> str:
    """Keep the parsed rows (not the upload) for the confirm step: confirming re-validates
    them against the database but does not parse the spreadsheet a second time. `expected` is
    what the preview found stored for each row (ImportPlan.snapshot()), which the confirm
    compares with what is stored then."""
    token = secrets.token_urlsafe(24)
    base = _staging_dir() / token
    sheets = {
        name: {"headers": sheet.headers, "rows": [[n, [_cell_json(c) for c in cells]] for n, cells in sheet.rows]}
        for name, sheet in workbook.sheets.items()
    }
    base.with_suffix(".data").write_text(json.dumps({"sheets": sheets, "expected": expected or {}}))
    base.with_suffix(".json").write_text(
        json.dumps(
            {"user": str(user_id), "filename": filename, "options": options, "staged_at": timezone.now().isoformat()}
        )
    )
    _sweep_stale()
    return token


def claim_staged(*, token: str, user_id) -> tuple[str, Workbook, dict, dict] | None:
    """The staged rows for `token` if they are this user's and still unclaimed, with the options
    and the preview's snapshot; gone after."""
    if not token or len(token) > 64 or not all(c.isalnum() or c in "-_" for c in token):
        return None
    base = _staging_dir() / token
    claimed = base.with_suffix(".claimed")
    try:
        meta = json.loads(base.with_suffix(".json").read_text())
        if meta["user"] != str(user_id):
            return None
        os.replace(base.with_suffix(".data"), claimed)  # atomic: only one request wins
    except (OSError, ValueError, KeyError):
        return None
    try:
        staged = json.loads(claimed.read_text())
        sheets = {
            name: Sheet(name, sheet["headers"], [(n, cells) for n, cells in sheet["rows"]])
            for name, sheet in staged["sheets"].items()
        }
        return meta["filename"], Workbook(sheets, []), meta.get("options", {}), staged.get("expected", {})
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        for suffix in (".claimed", ".json"):
            base.with_suffix(suffix).unlink(missing_ok=True)


STAGED_TTL_S = 6 * 3600


def _sweep_stale() -> None:
    cutoff = time.time() - STAGED_TTL_S
    for path in _staging_dir().iterdir():
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
        except OSError:
            continue
