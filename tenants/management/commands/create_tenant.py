"""`manage.py create_tenant SLUG [--name NAME] [--max-nodes N]`."""
from django.core.management.base import BaseCommand, CommandError
from django.utils.text import slugify

from tenants.services.tenants import create_tenant


class Command(BaseCommand):
    help = "Create a tenant (or update its quota); --max-nodes sets the quota for every generation."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--max-nodes", type=int, default=0, help="nodes the tenant may hold at once per generation")

    def handle(self, *args, slug: str, name: str, max_nodes: int, **options):
        if slugify(slug) != slug:
            raise CommandError(f"{slug!r} is not a slug; try {slugify(slug)!r}.")
        if max_nodes < 0:
            raise CommandError("--max-nodes must be 0 or more.")
        tenant, created = create_tenant(slug=slug, name=name, max_nodes=max_nodes, actor="system:create_tenant")
        self.stdout.write(f"{'created' if created else 'updated'} tenant {tenant.slug} ({tenant.pk}); "
                          f"quota {max_nodes} node(s) per generation")
