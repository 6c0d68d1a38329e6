"""Where a node's BMC is (address, MAC) moves from the node to its BMC record, so it is behind
the BMC record's permissions (fleet.change_nodebmc to change, fleet.view_nodebmc to read or
export), like the Redfish URL and credentials. Data: every node's address and MAC are copied to
its BMC record (one is created where the node had none); the credentials already stored are
bound to the origin of the Redfish URL they were used with, so they keep working there and
nowhere else; the search index's BMC entries move from the node to the record."""

from urllib.parse import urlsplit

import fleet.validators
from django.db import migrations, models

from core.search.registry import normalise


def _origin(url: str) -> str:
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme, 0)
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def move_bmc_address_and_mac(apps, schema_editor):
    Node = apps.get_model("fleet", "Node")
    NodeBMC = apps.get_model("fleet", "NodeBMC")
    SearchEntry = apps.get_model("core", "SearchEntry")
    records = {b.node_id: b for b in NodeBMC.objects.all()}
    changed, created = [], []
    for node_id, address, mac in (
        Node.objects.exclude(bmc_address="", bmc_mac="").values_list("pk", "bmc_address", "bmc_mac").iterator()
    ):
        record = records.get(node_id)
        if record is None:
            created.append(NodeBMC(node_id=node_id, address=address, mac=mac))
        else:
            record.address, record.mac = address, mac
            changed.append(record)
    for record in records.values():
        if record.redfish_url and not record.address:
            record.address = urlsplit(record.redfish_url).hostname or ""
            changed.append(record)
        if record.redfish_url and record.username_encrypted:
            record.credentials_origin = _origin(record.redfish_url)
            changed.append(record)
    NodeBMC.objects.bulk_update(list({r.pk: r for r in changed}.values()), ["address", "mac", "credentials_origin"])
    NodeBMC.objects.bulk_create(created, batch_size=1000)
    SearchEntry.objects.filter(kind__in=["bmc_address", "bmc_mac"]).delete()
    SearchEntry.objects.bulk_create(
        [
            SearchEntry(kind=kind, object_id=str(pk), value=normalise(value))
            for pk, address, mac in NodeBMC.objects.values_list("pk", "address", "mac").iterator()
            for kind, value in (("bmc_address", address), ("bmc_mac", mac))
            if value
        ],
        batch_size=2000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0027_node_events_and_drain_pending_indexes"),
        ("core", "0009_agent_identity_handoff"),
    ]

    operations = [
        migrations.AddField(
            model_name="nodebmc",
            name="address",
            field=models.CharField(
                blank=True,
                help_text="the BMC's IP address or DNS name",
                max_length=253,
                validators=[fleet.validators.validate_bmc_address],
            ),
        ),
        migrations.AddField(
            model_name="nodebmc",
            name="credentials_origin",
            field=models.CharField(
                blank=True,
                help_text="the scheme://host:port the credentials were entered for; used nowhere else",
                max_length=300,
            ),
        ),
        migrations.AddField(
            model_name="nodebmc",
            name="mac",
            field=models.CharField(
                blank=True,
                help_text="the BMC's MAC address, e.g. 3c:ec:ef:12:34:56",
                max_length=17,
                validators=[fleet.validators.validate_mac],
                verbose_name="BMC MAC",
            ),
        ),
        migrations.AddField(
            model_name="nodebmc",
            name="tls_ca_pem",
            field=models.TextField(
                blank=True,
                help_text="PEM certificate(s) of the CA that signed this BMC's certificate, trusted for it alone",
                verbose_name="TLS CA certificate",
            ),
        ),
        migrations.AddField(
            model_name="nodebmc",
            name="tls_pin_sha256",
            field=models.CharField(
                blank=True,
                help_text="SHA-256 of this BMC's own certificate (DER, hex): that certificate and no other (a self-signed one)",
                max_length=64,
                verbose_name="pinned certificate (SHA-256)",
            ),
        ),
        migrations.AlterField(
            model_name="nodebmc",
            name="redfish_url",
            field=models.URLField(
                blank=True,
                help_text="the BMC's Redfish service root, e.g. https://10.1.2.3 (scheme and host); empty until it is set",
                max_length=300,
            ),
        ),
        migrations.AlterField(
            model_name="nodebmc",
            name="last_error_kind",
            field=models.CharField(
                blank=True,
                choices=[
                    ("unreachable", "Unreachable"),
                    ("bad_credentials", "Bad credentials"),
                    ("not_supported", "Not supported by this BMC"),
                    ("refused", "Refused by the BMC"),
                    ("not_found", "System not found"),
                    ("error", "BMC error"),
                    ("policy", "Refused by the BMC network policy"),
                ],
                max_length=16,
            ),
        ),
        migrations.RunPython(move_bmc_address_and_mac, reverse_code=migrations.RunPython.noop),
        migrations.RemoveField(
            model_name="node",
            name="bmc_address",
        ),
        migrations.RemoveField(
            model_name="node",
            name="bmc_mac",
        ),
    ]
