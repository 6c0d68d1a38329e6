"""The database router sends billing to the ledger; advisory locks exclude a second run."""

import threading

import pytest
from django.apps import apps
from django.db import connections, transaction

from config.db_router import LedgerRouter
from core.locks import advisory_lock, locked_run


def test_billing_models_route_to_the_ledger_and_others_to_default():
    router = LedgerRouter()
    assert router.allow_migrate("ledger", "billing") and not router.allow_migrate("default", "billing")
    assert router.allow_migrate("default", "fleet") and not router.allow_migrate("ledger", "fleet")
    for model in apps.get_app_config("billing").get_models():
        assert router.db_for_write(model) == "ledger"


def test_unknown_lock_name_is_refused():
    with pytest.raises(KeyError, match="register it"), advisory_lock("no-such-loop"):
        pass


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_second_run_does_not_get_the_lock_while_the_first_holds_it():
    results = {}
    holding = threading.Event()
    release = threading.Event()

    def first():
        with locked_run("reconcile_nodes") as got:
            results["first"] = got
            holding.set()
            release.wait(10)
        connections.close_all()

    thread = threading.Thread(target=first)
    thread.start()
    assert holding.wait(10)
    with locked_run("reconcile_nodes") as got:
        results["second"] = got
    release.set()
    thread.join()
    assert results == {"first": True, "second": False}
    with locked_run("reconcile_nodes") as got:
        assert got  # released once the first run ended


@pytest.mark.django_db(transaction=True)
def test_advisory_lock_on_postgres_needs_a_transaction(is_postgres):
    if not is_postgres:
        pytest.skip("PostgreSQL-only rule")
    with pytest.raises(RuntimeError, match="open transaction"), advisory_lock("reconcile_nodes"):
        pass
    with transaction.atomic(), advisory_lock("reconcile_nodes") as got:
        assert got


def test_file_lock_excludes_a_second_holder_on_sqlite(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    if connections["default"].vendor == "postgresql":
        pytest.skip("the file lock is the SQLite fallback")
    with advisory_lock("health_sweep") as first, advisory_lock("health_sweep") as second:
        assert (first, second) == (True, False)
    with advisory_lock("health_sweep") as again:
        assert again
