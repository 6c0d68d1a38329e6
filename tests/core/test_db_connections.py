"""The PostgreSQL backend health-checks a persistent connection only after it sat idle
(core/db/postgresql): a request right after a good one skips `SELECT 1`; an idle, errored or
unused connection is still checked, and a connection the server dropped is replaced."""

from unittest import mock

import pytest
from django.db import OperationalError, connections

from core.db.postgresql import base as backend

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def conn():
    """A connection of its own, outside the test's transaction, as a web worker holds one."""
    wrapper = connections.create_connection("default")
    assert isinstance(wrapper, backend.DatabaseWrapper)
    yield wrapper
    wrapper.close()


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(backend.time, "monotonic", lambda: now[0])
    return now


def _request(conn, *, sql="SELECT 1"):
    """One request as Django runs it: the boundary, the work, the boundary."""
    conn.close_if_unusable_or_obsolete()
    if sql:
        with conn.cursor() as cursor:
            cursor.execute(sql)
    conn.close_if_unusable_or_obsolete()


def _checks(conn, **kwargs) -> int:
    with mock.patch.object(conn, "is_usable", wraps=conn.is_usable) as is_usable:
        _request(conn, **kwargs)
    return is_usable.call_count


def test_a_busy_connection_skips_the_health_check(conn, clock):
    _request(conn)  # opens the connection (new connections are not checked)
    clock[0] += 0.2
    assert _checks(conn) == 0
    clock[0] += 0.9
    assert _checks(conn) == 0


def test_an_idle_connection_is_checked(conn, clock):
    _request(conn)
    clock[0] += backend.HEALTH_CHECK_AFTER_IDLE_S + 0.1
    assert _checks(conn) == 1


def test_a_request_that_did_not_use_the_connection_proves_nothing(conn, clock):
    _request(conn)
    clock[0] += 5
    assert _checks(conn, sql=None) == 0  # nothing ran, nothing checked
    clock[0] += 0.1
    assert _checks(conn) == 1  # still 5 s since the connection last worked


def test_an_errored_request_proves_nothing(conn, clock):
    _request(conn)
    conn.close_if_unusable_or_obsolete()
    conn.errors_occurred = True  # as wrap_database_errors leaves it after an OperationalError
    clock[0] += 0.1
    with mock.patch.object(conn, "is_usable", return_value=False):
        conn.close_if_unusable_or_obsolete()
    assert conn.connection is None  # the broken connection is dropped at the boundary
    clock[0] += 0.1
    assert _checks(conn) == 0  # a new connection, known good
    clock[0] += 0.1
    assert _checks(conn) == 0


def test_a_connection_the_server_dropped_costs_one_request_then_reconnects(conn, clock):
    _request(conn)
    with conn.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    conn.close_if_unusable_or_obsolete()
    with connections["default"].cursor() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    clock[0] += 0.1
    conn.close_if_unusable_or_obsolete()  # recently proven: no check, the drop goes unnoticed
    with pytest.raises(OperationalError), conn.cursor() as cursor:
        cursor.execute("SELECT 1")
    conn.close_if_unusable_or_obsolete()  # the request's end: errored, checked, dropped
    assert conn.connection is None
    clock[0] += 0.1
    _request(conn)
    with conn.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid
