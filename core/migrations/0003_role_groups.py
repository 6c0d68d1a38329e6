"""The named groups of the permission model: operators, billing-admins, read-only
(core.services.permissions.ROLE_GROUPS). Permissions normally appear after migrate; they
are created here first so the groups can hold them on a fresh database."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

from core.services.permissions import ROLE_GROUPS, sync_role_groups


def create_role_groups(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0, using=schema_editor.connection.alias)
        app_config.models_module = None
    sync_role_groups(apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"))


def remove_role_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=list(ROLE_GROUPS)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0002_agent_token_revocation"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("fleet", "0006_migration_plans"),
        ("health", "0001_health"),
        ("tenants", "0003_quotas_partitions_volumes"),
        ("billing", "0001_ledger"),
        ("planning", "0001_plans_from_fleet"),
    ]

    operations = [migrations.RunPython(create_role_groups, remove_role_groups)]
