"""The database router sends billing to the ledger; advisory locks exclude a second run."""

import threading
from datetime import timedelta

import pytest
from django.apps import apps
from django.db import connections, transaction
from django.utils import timezone

from config.db_router import LedgerRouter
from core.locks import advisory_lock, leased_run, locked_run
from core.models import LoopLease


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


@pytest.mark.django_db(transaction=True)
def test_a_lease_excludes_a_second_run_without_holding_a_transaction():
    with leased_run("bmc_power_sync", ttl=timedelta(seconds=60)) as first:
        assert first and not connections["default"].in_atomic_block
        with leased_run("bmc_power_sync", ttl=timedelta(seconds=60)) as second:
            assert not second
        lease = LoopLease.objects.get(name="bmc_power_sync")
        assert lease.holder and lease.expires_at > timezone.now()
    assert LoopLease.objects.get(name="bmc_power_sync").holder == ""  # given back
    with leased_run("bmc_power_sync", ttl=timedelta(seconds=60)) as again:
        assert again


@pytest.mark.django_db(transaction=True)
def test_a_lease_left_by_a_killed_run_is_taken_once_it_expires():
    now = timezone.now()
    LoopLease.objects.create(name="bmc_power_sync", holder="host:1:dead", expires_at=now + timedelta(seconds=30))
    with leased_run("bmc_power_sync", ttl=timedelta(seconds=60)) as got:
        assert not got  # the killed run might still be running until its time limit
    LoopLease.objects.filter(name="bmc_power_sync").update(expires_at=now - timedelta(seconds=1))
    with leased_run("bmc_power_sync", ttl=timedelta(seconds=60)) as got:
        assert got
    with pytest.raises(KeyError, match="register it"), leased_run("no-such-loop", ttl=timedelta(seconds=1)):
        pass
