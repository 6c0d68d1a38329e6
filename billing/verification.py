"""Running the verifier and keeping its result (command, nightly task and console page)."""

import logging

from django.utils import timezone

from billing.models import VerificationRun
from billing.verifier import Report, verify_billing

LEDGER = "ledger"
KEPT_DIFFERENCES = 500
log = logging.getLogger("billing.verification")


def run_verification(*, actor: str, tenant_ids=None, record: bool = True) -> tuple[Report, VerificationRun | None]:
    """Verify every live invoice; record the pass (unless `record` is False); log differences."""
    started = timezone.now()
    report = verify_billing(tenant_ids=tenant_ids)
    saved = None
    if record:
        saved = VerificationRun.objects.using(LEDGER).create(
            started_at=started,
            finished_at=timezone.now(),
            invoices=report.invoices,
            credit_notes=report.credit_notes,
            runs=report.runs,
            usage_rows=report.usage_rows,
            difference_count=len(report.differences),
            differences=[d.as_dict() for d in report.differences[:KEPT_DIFFERENCES]],
            actor=actor[:200],
        )
    for difference in report.differences[:KEPT_DIFFERENCES]:
        log.error("billing verification: %s", difference)
    return report, saved


def last_verification() -> VerificationRun | None:
    return VerificationRun.objects.using(LEDGER).order_by("-started_at").first()


class VerificationFailed(Exception):
    """The nightly verification found differences (the loop is recorded as failed)."""
