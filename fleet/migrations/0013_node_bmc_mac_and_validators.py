"""BMC address as an IP or DNS name (was IP only, NULL when unknown) and the BMC MAC as its
own field; validators on hostnames and GPU UUIDs (no schema change for those)."""

from django.db import migrations, models

import fleet.validators


def blank_unknown_bmc_addresses(apps, schema_editor):
    apps.get_model("fleet", "Node").objects.filter(bmc_address__isnull=True).update(bmc_address="")


class Migration(migrations.Migration):
    dependencies = [("fleet", "0012_wall_power_and_energy")]

    operations = [
        migrations.AlterField(
            model_name="node",
            name="bmc_address",
            field=models.CharField(max_length=253, null=True, blank=True),
        ),
        migrations.RunPython(blank_unknown_bmc_addresses, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="node",
            name="bmc_address",
            field=models.CharField(
                blank=True,
                default="",
                help_text="the BMC's IP address or DNS name",
                max_length=253,
                validators=[fleet.validators.validate_bmc_address],
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="node",
            name="bmc_mac",
            field=models.CharField(
                blank=True,
                default="",
                help_text="the BMC's MAC address, e.g. 3c:ec:ef:12:34:56",
                max_length=17,
                validators=[fleet.validators.validate_mac],
                verbose_name="BMC MAC",
            ),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="node",
            name="hostname",
            field=models.CharField(max_length=100, unique=True, validators=[fleet.validators.validate_hostname]),
        ),
        migrations.AlterField(
            model_name="gpu",
            name="uuid",
            field=models.CharField(
                help_text="NVML UUID as nvidia-smi -L prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
                max_length=64,
                unique=True,
                validators=[fleet.validators.validate_gpu_uuid],
            ),
        ),
    ]
