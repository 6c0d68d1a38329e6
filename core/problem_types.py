"""Problem types: what each API problem `code` means and what to do about it.

Every problem the API (and the console's PDF links) answers has a `type` URI under the project's
own documentation path, `/docs/problems/<code>`, served from this registry. Each app keeps the
rows for the codes it raises in `<app>/problems.csv` (code, status, title, meaning, what_to_do)
and registers them from its `AppConfig.ready()`; core keeps only the mechanism and its own rows.
A test (tests/core/test_problem_types.py) reads the source for every code that can be raised
and checks that each has a row and each row is raised somewhere.
"""

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

DOCS_PATH = "/docs/problems/"
COLUMNS = ("code", "status", "title", "meaning", "what_to_do")
_CODE = re.compile(r"^[a-z][a-z0-9_]{1,63}$")


@dataclass(frozen=True)
class ProblemType:
    code: str
    statuses: tuple[int, ...]  # the HTTP status(es) a problem with this code is answered with
    title: str
    meaning: str
    what_to_do: str
    app: str

    @property
    def uri(self) -> str:
        return type_uri(self.code)


_registry: dict[str, ProblemType] = {}


def type_uri(code: str) -> str:
    """The `type` of a problem with this code: a path on this server (RFC 9457 allows a
    relative reference; it resolves against the URL the problem came from)."""
    return f"{DOCS_PATH}{code}"


def register(app_label: str, path: Path | str) -> None:
    """Load an app's problems.csv; a code another app registered, or a malformed row, stops start-up."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ImproperlyConfigured(f"{path}: columns must be {', '.join(COLUMNS)}")
        for line, row in enumerate(reader, start=2):
            code = row["code"].strip()
            if not _CODE.match(code):
                raise ImproperlyConfigured(f"{path}:{line}: {code!r} is not a snake_case problem code")
            try:
                statuses = tuple(int(s) for s in row["status"].split())
            except ValueError:
                statuses = ()
            if not statuses or not all(400 <= s <= 599 for s in statuses):
                raise ImproperlyConfigured(f"{path}:{line}: status must be one or more 4xx/5xx codes")
            if not all(row[column].strip() for column in COLUMNS):
                raise ImproperlyConfigured(f"{path}:{line}: every column needs text")
            known = _registry.get(code)
            if known is not None and known.app != app_label:
                raise ImproperlyConfigured(f"{path}:{line}: {code} is already registered by {known.app}")
            _registry[code] = ProblemType(
                code=code,
                statuses=statuses,
                title=row["title"].strip(),
                meaning=row["meaning"].strip(),
                what_to_do=row["what_to_do"].strip(),
                app=app_label,
            )


def register_app(app_config) -> None:
    """From an AppConfig.ready(): register `<app>/problems.csv`."""
    register(app_config.label, Path(app_config.path) / "problems.csv")


def problem_types() -> list[ProblemType]:
    return sorted(_registry.values(), key=lambda p: p.code)


def problem_type(code: str) -> ProblemType | None:
    return _registry.get(code)
