"""Golden software baselines per node type: created, made golden, audited."""

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import Conflict, Invalid
from core.services.audit import record_audit
from fleet.models import NodeType, SoftwareBaseline
from fleet.models.software import baseline_version_errors


def _snapshot(baseline: SoftwareBaseline) -> dict:
    return {"name": baseline.name, "versions": baseline.versions, "golden": baseline.golden}


@transaction.atomic
def create_baseline(
    *, node_type: NodeType, name: str, versions: dict, actor: str, golden: bool = False, reason: str = ""
) -> SoftwareBaseline:
    errors = baseline_version_errors(versions)
    if errors:
        raise Invalid(" ".join(errors), code="invalid_baseline")
    try:
        with transaction.atomic():
            baseline = SoftwareBaseline.objects.create(
                node_type=node_type, name=name, versions=versions, created_by=actor
            )
    except IntegrityError:
        raise Conflict(
            f"{node_type.slug} already has a baseline called {name!r}; choose another name.", code="baseline_exists"
        ) from None
    record_audit(actor=actor, action="baseline.create", target=baseline, after=_snapshot(baseline), reason=reason)
    if golden:
        baseline = set_golden(baseline=baseline, actor=actor, reason=reason or "created as golden")
    return baseline


@transaction.atomic
def set_golden(*, baseline: SoftwareBaseline, actor: str, reason: str = "") -> SoftwareBaseline:
    """Make `baseline` the golden one of its node type (the previous golden one stops being it)."""
    baseline = SoftwareBaseline.objects.select_for_update().get(pk=baseline.pk)
    previous = (
        SoftwareBaseline.objects.select_for_update()
        .filter(node_type_id=baseline.node_type_id, golden=True)
        .exclude(pk=baseline.pk)
        .first()
    )
    if previous is not None:
        previous.golden = False
        previous.save(update_fields=["golden", "updated_at"])
    before = _snapshot(baseline) | {"previous_golden": previous.name if previous else None}
    baseline.golden, baseline.golden_set_by, baseline.golden_set_at = True, actor, timezone.now()
    baseline.save(update_fields=["golden", "golden_set_by", "golden_set_at", "updated_at"])
    record_audit(
        actor=actor,
        action="baseline.set_golden",
        target=baseline,
        before=before,
        after=_snapshot(baseline),
        reason=reason,
    )
    return baseline
