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
        parser.add_argument("--max-volumes", type=int, default=None, help="volumes the tenant may hold")
        parser.add_argument("--max-storage-gb", type=int, default=None, help="total GB of the tenant's volumes")

    def handle(self, *args, slug: str, name: str, max_nodes: int, max_volumes=None, max_storage_gb=None, **options):
        if slugify(slug) != slug:
            raise CommandError(f"{slug!r} is not a slug; try {slugify(slug)!r}.")
        if max_nodes < 0 or (max_volumes or 0) < 0 or (max_storage_gb or 0) < 0:
            raise CommandError("--max-nodes, --max-volumes and --max-storage-gb must be 0 or more.")
        tenant, created = create_tenant(
            slug=slug,
            name=name,
            max_nodes=max_nodes,
            actor="system:create_tenant",
            max_volumes=max_volumes,
            max_storage_gb=max_storage_gb,
        )
        storage = tenant.storage_quota
        self.stdout.write(
            f"{'created' if created else 'updated'} tenant {tenant.slug} ({tenant.pk}); "
            f"quota {max_nodes} node(s) per generation, {storage.max_volumes} volume(s), "
            f"{storage.max_gb} GB"
        )
