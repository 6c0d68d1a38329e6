import core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0010_token_scope_and_expiry"),
    ]

    operations = [
        migrations.AlterField(
            model_name="apitoken",
            name="name",
            field=models.CharField(blank=True, max_length=100, validators=[core.validators.DisplayTextValidator()]),
        ),
    ]
