import core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0028_bmc_address_on_the_bmc_record"),
    ]

    operations = [
        migrations.AlterField(
            model_name="fabricdomain",
            name="name",
            field=models.CharField(max_length=100, validators=[core.validators.DisplayTextValidator()]),
        ),
        migrations.AlterField(
            model_name="hall",
            name="name",
            field=models.CharField(max_length=100, validators=[core.validators.DisplayTextValidator()]),
        ),
        migrations.AlterField(
            model_name="powerfeed",
            name="name",
            field=models.CharField(max_length=50, validators=[core.validators.DisplayTextValidator()]),
        ),
        migrations.AlterField(
            model_name="rack",
            name="name",
            field=models.CharField(max_length=50, validators=[core.validators.DisplayTextValidator()]),
        ),
        migrations.AlterField(
            model_name="rollout",
            name="name",
            field=models.CharField(max_length=120, validators=[core.validators.DisplayTextValidator()]),
        ),
        migrations.AlterField(
            model_name="site",
            name="name",
            field=models.CharField(max_length=100, unique=True, validators=[core.validators.DisplayTextValidator()]),
        ),
        migrations.AlterField(
            model_name="softwarebaseline",
            name="name",
            field=models.CharField(
                help_text="e.g. 2026.11 driver 570", max_length=80, validators=[core.validators.DisplayTextValidator()]
            ),
        ),
    ]
