import django.db.models.deletion
from django.db import migrations, models

import core.ids

# What tenants that existed before storage quotas keep: the defaults of
# tenants.services.tenants (written out, since a migration must not change with the code).
EXISTING_MAX_VOLUMES = 64
EXISTING_MAX_GB = 100_000


def give_existing_tenants_the_default(apps, schema_editor):
    Tenant = apps.get_model("tenants", "Tenant")
    StorageQuota = apps.get_model("tenants", "StorageQuota")
    StorageQuota.objects.bulk_create(
        [StorageQuota(tenant=t, max_volumes=EXISTING_MAX_VOLUMES, max_gb=EXISTING_MAX_GB) for t in Tenant.objects.all()]
    )


class Migration(migrations.Migration):
    dependencies = [("tenants", "0003_quotas_partitions_volumes")]

    operations = [
        migrations.CreateModel(
            name="StorageQuota",
            fields=[
                ("id", models.UUIDField(default=core.ids.uuid7, editable=False, primary_key=True, serialize=False)),
                ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("max_volumes", models.PositiveIntegerField()),
                ("max_gb", models.PositiveBigIntegerField(help_text="total size_gb of all the tenant's volumes")),
                (
                    "tenant",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="storage_quota", to="tenants.tenant"
                    ),
                ),
            ],
            options={"abstract": False},
        ),
        migrations.RunPython(give_existing_tenants_the_default, migrations.RunPython.noop),
    ]
