from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0029_names_refuse_control_characters"),
    ]

    operations = [
        migrations.AlterField(
            model_name="node",
            name="attribution",
            field=models.CharField(
                blank=True,
                choices=[
                    ("provider", "Provider"),
                    ("tenant", "Tenant"),
                    ("node", "Node"),
                    ("unconfirmed", "Node-reported, unconfirmed"),
                ],
                max_length=16,
            ),
        ),
    ]
