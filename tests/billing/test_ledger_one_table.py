"""On SQLite the ledger is one table: archiving is refused with the reason, listing says so."""

from datetime import date
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from billing.services.ledger_partitions import ArchiveRefused, archive_month, ensure_usage_partitions

from .conftest import LEDGER_DBS

pytestmark = [
    pytest.mark.django_db(databases=LEDGER_DBS),
    pytest.mark.skipif(connections["ledger"].vendor == "postgresql", reason="PostgreSQL partitions its ledger"),
]


def test_archiving_is_refused_with_the_reason_and_nothing_is_made():
    with pytest.raises(ArchiveRefused) as err:
        archive_month(date(2025, 6, 1), actor="test")
    assert err.value.code == "ledger_not_partitioned"
    assert ensure_usage_partitions() == []
    with pytest.raises(CommandError, match="one table on SQLite"):
        call_command("archive_ledger_month", "2025-06", "--yes")
    out = StringIO()
    call_command("archive_ledger_month", "--list", stdout=out)
    assert "one table here" in out.getvalue()
