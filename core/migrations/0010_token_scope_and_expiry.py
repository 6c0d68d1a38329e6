"""API tokens get an expiry and operator tokens a scope of their own. Data: each operator token
issued before this carries, from now on, the rights its user holds today (a superuser's token
stays a superuser's); it never gains what the user is given later. Existing tokens keep no
expiry; new ones get API_TOKEN_LIFETIME_DAYS."""

from django.db import migrations, models


def freeze_operator_scopes(apps, schema_editor):
    ApiToken = apps.get_model("core", "ApiToken")
    Permission = apps.get_model("auth", "Permission")
    label = {
        p.pk: f"{p.content_type.app_label}.{p.codename}" for p in Permission.objects.select_related("content_type")
    }
    for token in ApiToken.objects.filter(kind="operator").select_related("user"):
        user = token.user
        ids = set(user.user_permissions.values_list("pk", flat=True))
        for group in user.groups.all():
            ids |= set(group.permissions.values_list("pk", flat=True))
        token.scope_superuser = bool(user.is_superuser)
        token.scope_permissions = sorted(label[i] for i in ids if i in label)
        token.save(update_fields=["scope_superuser", "scope_permissions"])


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0009_agent_identity_handoff"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(
                blank=True, help_text="after this the token is refused; empty: it does not expire", null=True
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="scope_permissions",
            field=models.JSONField(
                blank=True, default=list, editable=False, help_text='the rights at issue, "app_label.codename"'
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="scope_superuser",
            field=models.BooleanField(default=False, help_text="issued to a superuser, by a superuser"),
        ),
        migrations.RunPython(freeze_operator_scopes, reverse_code=migrations.RunPython.noop),
    ]
