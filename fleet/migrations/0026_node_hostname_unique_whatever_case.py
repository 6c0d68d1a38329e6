import django.db.models.functions.text
from django.db import migrations, models
from django.db.models import Count
from django.db.models.functions import Lower


def refuse_case_twins(apps, schema_editor):
    """The unique index cannot be built over two nodes whose hostnames differ only in case (the
    issue's DC1-GPU00003 next to dc1-gpu00003). Name them, so an operator renames one first,
    instead of failing with the database's bare constraint error."""
    Node = apps.get_model("fleet", "Node")
    twins = list(
        Node.objects.annotate(lowered=Lower("hostname"))
        .values("lowered")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .values_list("lowered", flat=True)[:20]
    )
    if twins:
        names = sorted(
            Node.objects.annotate(lowered=Lower("hostname"))
            .filter(lowered__in=twins)
            .values_list("hostname", flat=True)
        )
        raise RuntimeError(
            "Hostnames are becoming case-insensitive, but these nodes differ only in letter case: "
            + ", ".join(names)
            + ". Rename one of each pair (admin, or the import with updates), then migrate again."
        )


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0025_custody_destination_decides_sanitisation"),
    ]

    operations = [
        migrations.RunPython(refuse_case_twins, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="node",
            constraint=models.UniqueConstraint(
                django.db.models.functions.text.Lower("hostname"),
                name="fleet_node_hostname_ci_unique",
                violation_error_message="Another node has this hostname in other letter case; hostnames are not case-sensitive. Choose another name.",
            ),
        ),
    ]
