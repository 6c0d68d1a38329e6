"""`manage.py create_token --tenant SLUG --role ROLE | --operator USERNAME | --agent HOSTNAME`.

`--agent` again for the same node re-keys it: the tokens printed before stop working.

Prints the plain token alone on the last line of stdout (scripts read it from there).
"""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from core.choices import ApiTokenKind, TenantRole
from core.services.agent_credentials import NodeRetired, issue_agent_token
from core.services.tokens import DEFAULT_EXPIRY, create_api_token
from fleet.models import Node
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Create an API token and print its plain value (shown once)."

    def add_arguments(self, parser):
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--tenant", help="tenant slug (with --role)")
        who.add_argument("--operator", help="staff username")
        who.add_argument("--agent", help="node hostname")
        parser.add_argument("--role", choices=TenantRole.values, help="tenant role: admin, member or viewer")
        parser.add_argument("--name", default="", help="a label to recognise the token by")
        parser.add_argument(
            "--expires-in-days",
            type=int,
            default=None,
            help="tenant and operator tokens: days until it expires (default API_TOKEN_LIFETIME_DAYS; 0: never)",
        )

    def handle(self, *args, tenant=None, operator=None, agent=None, role=None, name="", **options):
        days = options.get("expires_in_days")
        if days is not None and days < 0:
            raise CommandError("--expires-in-days is a number of days ≥ 0 (0: the token does not expire).")
        self.expiry = DEFAULT_EXPIRY if days is None else (timezone.now() + timedelta(days=days) if days else None)
        actor = "system:create_token"
        if agent:
            node = Node.objects.filter(hostname=agent).first()
            if node is None:
                raise CommandError(f"No node with hostname {agent!r}.")
            try:
                # Re-keying: the node's earlier tokens stop working from now on.
                plain = issue_agent_token(node=node, actor=actor)
            except NodeRetired as exc:
                raise CommandError(str(exc)) from None
        elif tenant:
            if not role:
                raise CommandError("--tenant needs --role (admin, member or viewer).")
            tenant_obj = Tenant.objects.filter(slug=tenant).first()
            if tenant_obj is None:
                raise CommandError(f"No tenant {tenant!r}. Create it with `manage.py create_tenant {tenant}`.")
            plain = self._create(kind=ApiTokenKind.TENANT, tenant=tenant_obj, role=role, name=name, actor=actor)
        else:
            user = get_user_model().objects.filter(username=operator).first()
            if user is None or not user.is_staff:
                raise CommandError(f"No staff user {operator!r}. Create one with `manage.py createsuperuser`.")
            plain = self._create(kind=ApiTokenKind.OPERATOR, user=user, name=name, actor=actor)
        self.stdout.write(plain)

    def _create(self, **kwargs) -> str:
        try:
            _, plain = create_api_token(expires_at=self.expiry, **kwargs)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        return plain
