"""The demo seeds golden baselines and node stacks, some on an older driver: drift shows."""

import io

import pytest

from devtools.services.demo_software import seed_demo_software
from fleet.models import SoftwareBaseline
from fleet.selectors import drift_report

pytestmark = pytest.mark.django_db


def test_some_demo_nodes_are_on_an_older_driver_and_show_as_drift(small_fleet):
    out = io.StringIO()
    seed_demo_software(out)
    assert SoftwareBaseline.objects.filter(golden=True).count() == 1
    report = drift_report()
    driver = next(g for g in report.groups if g.component == "gpu_driver")
    assert driver.drifting_count >= 1 and driver.nodes_on_baseline >= 1
    assert not report.unreported
    seed_demo_software(out)  # idempotent
    assert "already seeded" in out.getvalue()
