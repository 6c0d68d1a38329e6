"""The Prometheus alert rules shipped in deploy/prometheus/: valid (promtool check rules), their
own unit tests pass (promtool test rules), every series they read is served by /metrics, and
the late-loop rule gives the answer the overview gives."""

import re
import shutil
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from core.loop_metrics import loop_statuses, record_loop_run
from core.services.beat_lease import hold_beat_lease

pytestmark = pytest.mark.django_db
RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian: apt-get install prometheus); rules not checked"
)


@needs_promtool
def test_promtool_checks_the_rules():
    result = subprocess.run(
        [PROMTOOL, "check", "rules", "hangar-rules.yml"], cwd=RULES, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


@needs_promtool
def test_promtool_rule_unit_tests_pass():
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "hangar-rules.test.yml"], cwd=RULES, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _names_in_rules() -> set[str]:
    text = (RULES / "hangar-rules.yml").read_text()
    exprs = " ".join(re.findall(r"expr: (?:>-\n)?((?:.+\n)+?)\s+(?:for|labels):", text))
    return {re.sub(r"_(count|sum|bucket)$", "", n) for n in re.findall(r"\b(hangar_[a-z_]+)", exprs)}


def test_every_series_the_rules_read_is_served(ops_api):
    names = _names_in_rules()
    assert len(names) >= 8, names  # the parse found the expressions
    body = ops_api.get("/metrics", HTTP_ACCEPT="text/plain;version=0.0.4").content.decode()
    served = set(re.findall(r"^# TYPE (hangar_[a-z_]+) ", body, flags=re.M))
    assert names <= served, sorted(names - served)


def test_the_late_loop_rule_agrees_with_the_overview(ops_api):
    """time() > next_due + grace, computed from the scrape, is late exactly where the overview says:
    a scheduler started 20 minutes ago, the allocation loop last ran 10 minutes ago, the health
    sweep a moment ago, the rest never since the start."""
    hold_beat_lease(holder="beat:1", now=timezone.now() - timedelta(minutes=20))
    record_loop_run("allocation_loop", seconds=0.1, finished_at=timezone.now() - timedelta(minutes=10))
    record_loop_run("health_sweep", seconds=0.1, finished_at=timezone.now())
    body = ops_api.get("/metrics", HTTP_ACCEPT="text/plain;version=0.0.4").content.decode()
    now = time.time()
    families = {
        f.name: {s.labels["loop"]: s.value for s in f.samples}
        for f in text_string_to_metric_families(body)
        if f.name in ("hangar_loop_next_due_timestamp_seconds", "hangar_loop_grace_seconds")
    }
    due, grace = families["hangar_loop_next_due_timestamp_seconds"], families["hangar_loop_grace_seconds"]
    rule = {loop for loop in due if now > due[loop] + grace[loop]}
    overview = {s.name for s in loop_statuses(timezone.now()) if s.late}
    assert rule == overview
    assert "allocation_loop" in rule and "health_sweep" not in rule and "purge_idempotency_keys" not in rule
