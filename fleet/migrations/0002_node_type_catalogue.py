"""Preload the NodeType catalogue from core/reference/generations.csv (sources kept on each row)."""

from django.db import migrations


def load_catalogue(apps, schema_editor):
    from fleet.catalogue import catalogue_rows

    NodeType = apps.get_model("fleet", "NodeType")
    for row in catalogue_rows():
        NodeType.objects.update_or_create(slug=row["slug"], defaults=row)


class Migration(migrations.Migration):
    dependencies = [("fleet", "0001_initial")]
    operations = [migrations.RunPython(load_catalogue, migrations.RunPython.noop)]
