from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Core"

    def ready(self):
        from django.db.models.signals import post_migrate

        from core.api import schema  # noqa: F401  registers the security schemes with drf-spectacular
        from core.services import login_audit  # noqa: F401  connects the sign-in audit receivers

        post_migrate.connect(_top_up_role_groups, sender=self)


def _top_up_role_groups(sender, using="default", **kwargs):
    """After every migrate (and every test flush) the named groups exist and hold the
    permissions of the table, including those of models added since the data migration."""
    from django.apps import apps
    from django.contrib.auth.management import create_permissions
    from django.contrib.auth.models import Group, Permission
    from django.db import router

    from core.services.permissions import PROJECT_APPS, sync_role_groups

    if not router.allow_migrate_model(using, Permission):
        return
    for label in PROJECT_APPS:
        create_permissions(apps.get_app_config(label), verbosity=0, using=using)
    sync_role_groups(Group, Permission)
