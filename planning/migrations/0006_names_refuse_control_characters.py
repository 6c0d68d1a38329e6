import core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("planning", "0005_disposition_assignment_constraint"),
    ]

    operations = [
        migrations.AlterField(
            model_name="capacityplan",
            name="name",
            field=models.CharField(max_length=200, validators=[core.validators.DisplayTextValidator()]),
        ),
        migrations.AlterField(
            model_name="dispositionplan",
            name="name",
            field=models.CharField(max_length=200, validators=[core.validators.DisplayTextValidator()]),
        ),
        migrations.AlterField(
            model_name="migrationplan",
            name="name",
            field=models.CharField(max_length=100, validators=[core.validators.DisplayTextValidator()]),
        ),
    ]
