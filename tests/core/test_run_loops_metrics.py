"""`manage.py run_loops` and the Celery workers record each loop under one name, so /metrics
shows one series per loop whichever runner ran it."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.utils.module_loading import import_string
from prometheus_client.parser import text_string_to_metric_families

from core.loop_metrics import loop_label, task_finished, task_started
from core.loops import LOOPS, control_loops
from core.periodic import PERIODIC_TASKS

pytestmark = pytest.mark.django_db


def _series(ops_api) -> dict:
    body = ops_api.get("/metrics", HTTP_ACCEPT="text/plain;version=0.0.4").content.decode()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    return {
        "last": {s.labels["loop"]: s.value for s in families["hangar_loop_last_run_timestamp_seconds"].samples},
        "passes": {
            s.labels["loop"]: s.value
            for s in families["hangar_loop_duration_seconds"].samples
            if s.name.endswith("_count")
        },
    }


def test_every_control_loop_is_a_periodic_task_with_its_interval():
    periodic = {spec.task: spec for spec in PERIODIC_TASKS}
    loops = control_loops()
    assert len(loops) == len(LOOPS)
    for (task, callable_path), loop in zip(LOOPS, loops):
        assert loop.name == loop_label(task) and loop.every_seconds == periodic[task].every_seconds
        assert callable(import_string(task)) and callable(import_string(callable_path))


def test_run_loops_and_celery_passes_land_on_the_same_series(ops_api):
    out = StringIO()
    call_command("run_loops", "--once", stdout=out)
    periodic_names = {loop_label(spec.task) for spec in PERIODIC_TASKS}
    ran = [loop.name for loop in control_loops()]
    assert [line.split(":")[0] for line in out.getvalue().splitlines()] == ran
    series = _series(ops_api)
    # one series per scheduled loop: no run_loops-only names beside the Celery tasks' names
    assert set(series["last"]) == periodic_names
    assert all(series["last"][name] > 0 and series["passes"][name] == 1 for name in ran)

    class Task:  # a Celery worker's pass of the same loop, through the signal handlers
        name = "fleet.tasks.advance_bring_up"

    task_started(task_id="t1", task=Task())
    task_finished(task_id="t1", task=Task(), state="SUCCESS")
    series = _series(ops_api)
    assert series["passes"]["advance_bring_up"] == 2 and set(series["last"]) == periodic_names
