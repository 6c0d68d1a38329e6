"""Disposition plans no longer store plotly JSON: the console draws the figures at render time
from the numbers the result already holds (planning/disposition_charts.py). Rows stored before
that carry a ``figures`` key; this removes it so every row has one shape. Nothing is lost: the
figures were drawn from the same result. The reverse leaves rows as they are (the reader never
reads ``figures``)."""

from django.db import migrations

BATCH = 500


def drop_figures(apps, schema_editor):
    DispositionPlan = apps.get_model("planning", "DispositionPlan")
    stale = DispositionPlan.objects.filter(result__has_key="figures").only("id", "result")
    batch = []
    for plan in stale.iterator(chunk_size=BATCH):
        plan.result.pop("figures", None)
        batch.append(plan)
        if len(batch) >= BATCH:
            DispositionPlan.objects.bulk_update(batch, ["result"])
            batch = []
    if batch:
        DispositionPlan.objects.bulk_update(batch, ["result"])


class Migration(migrations.Migration):
    dependencies = [
        ("planning", "0002_capacity_plans"),
    ]

    operations = [
        migrations.RunPython(drop_figures, migrations.RunPython.noop),
    ]
