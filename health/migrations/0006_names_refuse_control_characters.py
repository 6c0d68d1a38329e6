import core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("health", "0005_fabric_holds"),
    ]

    operations = [
        migrations.AlterField(
            model_name="incident",
            name="title",
            field=models.CharField(max_length=200, validators=[core.validators.DisplayTextValidator()]),
        ),
    ]
