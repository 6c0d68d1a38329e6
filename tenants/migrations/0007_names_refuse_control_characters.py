import core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0006_merge_baseline_flag_and_billing_profile"),
    ]

    operations = [
        migrations.AlterField(
            model_name="allocation",
            name="name",
            field=models.CharField(max_length=100, validators=[core.validators.DisplayTextValidator()]),
        ),
        migrations.AlterField(
            model_name="fabricpartition",
            name="name",
            field=models.CharField(max_length=100, validators=[core.validators.DisplayTextValidator()]),
        ),
        migrations.AlterField(
            model_name="tenant",
            name="legal_name",
            field=models.CharField(
                blank=True,
                help_text="as printed on invoices; the name if empty",
                max_length=200,
                validators=[core.validators.DisplayTextValidator()],
            ),
        ),
        migrations.AlterField(
            model_name="tenant",
            name="name",
            field=models.CharField(max_length=200, validators=[core.validators.DisplayTextValidator()]),
        ),
        migrations.AlterField(
            model_name="volume",
            name="name",
            field=models.CharField(max_length=100, validators=[core.validators.DisplayTextValidator()]),
        ),
    ]
