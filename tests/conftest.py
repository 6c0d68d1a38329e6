"""Shared fixtures: users, API clients, tokens, the seeded fleet (once per session,
tests/session_fleet.py), and the rules for tests that need PostgreSQL, Redis, Chromium or Pango."""

import os
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from tests.session_fleet import fleet_template, seeded_database_for_test, small_fleet_for  # noqa: F401 (fixtures)


@pytest.hookimpl(tryfirst=True)  # before -m selects: the browser tests' `slow` must be on them by then
def pytest_collection_modifyitems(config, items):
    from django.conf import settings

    on_postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    skip_pg = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL); real concurrency is tested there")
    on_redis = "Redis" in settings.CACHES["default"]["BACKEND"]
    skip_redis = pytest.mark.skip(reason="needs Redis as the shared cache (set REDIS_URL)")
    skip_pdf = None
    if any("pdf" in item.keywords for item in items):
        from fleet.pdf import pdf_unavailable_reason

        missing = pdf_unavailable_reason()
        skip_pdf = pytest.mark.skip(reason=f"needs Pango to render PDFs: {missing}") if missing else None
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(pytest.mark.slow)  # make test-fast leaves the browser out
        if "postgres" in item.keywords and not on_postgres:
            item.add_marker(skip_pg)
        if "redis" in item.keywords and not on_redis:
            item.add_marker(skip_redis)
        if skip_pdf is not None and "pdf" in item.keywords:
            item.add_marker(skip_pdf)
        _open_both_databases(item)


def _open_both_databases(item) -> None:
    """Pages and APIs read the ledger too (prices, usage): a test that uses the database may
    use both, each wrapped in its own rolled-back transaction. Transactional tests are left as
    they are: flushing the ledger would hit its append-only triggers, so they opt in explicitly."""
    marker = item.get_closest_marker("django_db")
    uses_db = marker is not None or "db" in getattr(item, "fixturenames", ())
    if not uses_db or "transactional_db" in item.fixturenames or "live_server" in item.fixturenames:
        return
    kwargs = dict(marker.kwargs) if marker else {}
    if kwargs.get("transaction") or kwargs.get("databases"):
        return
    item.add_marker(pytest.mark.django_db(databases=["default", "ledger"], **kwargs))


@pytest.fixture(autouse=True)
def node_type_catalogue(request):
    """Transactional tests flush every table, data migrations included; put the catalogue and the\n    role groups back."""
    if request.node.get_closest_marker("django_db") or {"db", "transactional_db"} & set(request.fixturenames):
        request.getfixturevalue("_django_db_helper")  # database access first, as the test asked for it
        from django.contrib.auth.models import Group

        from core.services.permissions import top_up_role_groups
        from fleet.catalogue import ensure_node_type_catalogue

        ensure_node_type_catalogue()
        if not Group.objects.filter(name="operators").exists():  # a transactional test flushed them
            top_up_role_groups()


@pytest.fixture
def operator_user(django_user_model):
    return django_user_model.objects.create_user("op", password="op-pass-123", is_staff=True, is_superuser=True)


@pytest.fixture
def operator_client(client, operator_user):
    client.force_login(operator_user)
    return client


@pytest.fixture
def api():
    return APIClient()


@pytest.fixture
def operator_token(operator_user):
    from core.services.tokens import create_api_token

    _, plain = create_api_token(kind="operator", user=operator_user, actor="test")
    return plain


@pytest.fixture
def ops_api(operator_token):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {operator_token}")
    return client


@pytest.fixture
def _django_db_helper(seeded_database_for_test, _django_db_helper):  # noqa: F811 (wraps the plugin's)
    """pytest-django's per-test database set-up, after choosing which database the test gets
    (the seeded copy for `small_fleet`, tests/session_fleet.py)."""
    yield _django_db_helper


@pytest.fixture
def small_fleet(request, db):
    """64 GPUs: 8 H100 nodes in 4 racks, one NDR pod, plus the empty liquid hall. Seeded once
    per session and shared through per-test transactions (tests/session_fleet.py)."""
    return small_fleet_for(request)


@pytest.fixture
def is_postgres():
    return connection.vendor == "postgresql"


def chromium_path() -> str | None:
    path = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    return path if os.path.exists(path) else None


class ServerClock:
    """The server's clock, moved by tests: long outages are simulated, not waited for."""

    def __init__(self):
        self.at = datetime.now(UTC).replace(microsecond=0)

    def now(self):
        return self.at

    def advance(self, by: float | timedelta):
        self.at += by if isinstance(by, timedelta) else timedelta(seconds=by)
        return self.at


@pytest.fixture
def server_clock(monkeypatch):
    """Every `timezone.now()` in the process (the live server's thread too) reads this clock."""
    clock = ServerClock()
    monkeypatch.setattr(timezone, "now", clock.now)
    return clock
