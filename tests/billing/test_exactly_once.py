"""Property: whatever order usage arrives in and months are finalized (or re-issued), every
GPU-microsecond lands on exactly one live finalized invoice — never twice, never not at all."""

import uuid
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import transaction
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from billing.models import Invoice, InvoiceLine
from billing.services.corrections import reissue_invoice
from billing.services.runs import BillingRunError, run_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
MONTHS = [date(2026, m, 1) for m in (5, 6, 7, 8)]
AFTER = date(2026, 9, 1)  # the month whose invoice absorbs what arrived after everything closed
NOW = datetime(2026, 12, 1, tzinfo=UTC)


class _Operator:
    is_authenticated = is_staff = is_active = True
    actor = "test:operator"

    def has_perm(self, perm):
        return True


class _Rollback(Exception):
    pass


ACTIONS = st.one_of(
    st.tuples(st.just("usage"), st.integers(0, 3), st.integers(0, 27 * 24 * 3600), st.integers(1, 7200)),
    st.tuples(st.just("finalize"), st.integers(0, 3)),
    st.tuples(st.just("reissue"), st.integers(0, 3)),
)


@settings(
    max_examples=30,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(ACTIONS, min_size=1, max_size=25))
def test_random_arrival_and_finalization_orders_bill_each_gpu_second_once(ingest, actions):
    tenant = uuid.uuid4()
    sent: Counter = Counter()
    try:
        with transaction.atomic(using="ledger"), transaction.atomic():
            for action in actions:
                if action[0] == "usage":
                    _, month, offset, seconds = action
                    start = datetime(MONTHS[month].year, MONTHS[month].month, 1, tzinfo=UTC) + timedelta(seconds=offset)
                    ingest([make_event(tenant_id=tenant, start=start, seconds=seconds, gpus=8)])
                    sent[MONTHS[month]] += 8 * seconds * 10**6
                elif action[0] == "finalize":
                    try:
                        run_billing(period=MONTHS[action[1]], finalize=True, actor="test", now=NOW)
                    except BillingRunError as refused:
                        assert refused.code == "earlier_period_open"
                else:
                    live = Invoice.objects.filter(
                        tenant_id=tenant, period=MONTHS[action[1]], status="finalized"
                    ).first()
                    if live is not None:
                        reissue_invoice(by=_Operator(), invoice_id=live.pk, reason="property test")
            for month in [*MONTHS, AFTER]:  # close everything, in order
                run_billing(period=month, finalize=True, actor="test", now=NOW)
            billed: Counter = Counter()
            for period, micro in InvoiceLine.objects.filter(
                invoice__tenant_id=tenant, invoice__status="finalized", kind__in=["usage", "late_usage"]
            ).values_list("usage_period", "quantity_micro"):
                billed[period] += micro
            assert billed == sent
            assert not Invoice.objects.filter(tenant_id=tenant, status="draft").exists()
            raise _Rollback
    except _Rollback:
        pass
