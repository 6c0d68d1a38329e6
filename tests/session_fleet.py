"""`small_fleet` seeded once per session (per xdist worker), not once per test.

The first test that asks for `small_fleet` copies the freshly migrated test database and seeds
the 64-GPU fleet into the copy (tests/template_databases.py). From then on every test that asks
for it runs against that copy, inside the same rolled-back transaction as any other test, so
what a test writes is gone before the next one; tests that do not ask for it run against the
empty database as before. The switch happens before pytest-django opens the test's
transaction (conftest.py wraps `_django_db_helper`).

Transactional tests (`transactional_db`, `live_server`, `django_db(transaction=True)`) commit
and then flush every table, which would empty the copy for everybody: they get the empty
database and a fleet seeded for them, as before. So does a test that asks for `small_fleet`
only at run time (`request.getfixturevalue`).

Within a session the seeded ids are the same in every test, so each seeded-fleet test also
gets its own cache key prefix: nothing one test cached about a node is read by the next.
"""

import uuid
from dataclasses import dataclass, replace

import pytest

from tests.template_databases import clone, database_name, drop, point_at

ALIAS = "default"  # the seed writes the control-plane database only; the ledger stays as it is
SEEDED_SUFFIX = "_fleet"
FLEET_GPUS = 64


@dataclass
class FleetTemplate:
    plain: str  # the empty (migrated) test database
    seeded: str  # its copy holding the fleet
    result: object  # the SeedResult of the one seeding


_template: FleetTemplate | None = None


def wants_seeded_copy(request) -> bool:
    names = request.fixturenames
    if "small_fleet" not in names:
        return False
    if {"transactional_db", "live_server", "django_db_reset_sequences", "django_db_serialized_rollback"} & set(names):
        return False
    marker = request.node.get_closest_marker("django_db")
    if marker is not None:
        from pytest_django.fixtures import validate_django_db

        transactional, reset_sequences, _databases, serialized_rollback, _apps = validate_django_db(marker)
        if transactional or reset_sequences or serialized_rollback:
            return False
    return True


@pytest.fixture(scope="session")
def fleet_template(django_db_setup, django_db_blocker):
    """Seed the fleet once into a copy of the test database."""
    global _template
    from devtools.services.fleet_seed import seed_fleet

    with django_db_blocker.unblock():
        plain = database_name(ALIAS)
        seeded = f"{plain}{SEEDED_SUFFIX}"
        clone(ALIAS, seeded)
        point_at(ALIAS, seeded)
        try:
            result = seed_fleet(gpus=FLEET_GPUS)
        finally:
            point_at(ALIAS, plain)
    _template = FleetTemplate(plain=plain, seeded=seeded, result=result)
    yield _template
    _template = None
    with django_db_blocker.unblock():
        point_at(ALIAS, plain)  # the test databases are torn down by their own names next
        drop(ALIAS, seeded)


@pytest.fixture
def seeded_database_for_test(request, django_db_setup):
    """Point the default alias at the seeded copy for a test that wants it, at the empty
    database otherwise. Runs before the test's transaction is opened."""
    if wants_seeded_copy(request):
        template = request.getfixturevalue("fleet_template")
        point_at(ALIAS, template.seeded)
        from django.core.cache import caches

        cache = caches["default"]
        prefix = cache.key_prefix
        cache.key_prefix = f"{prefix}:{uuid.uuid4().hex[:12]}"
        yield
        cache.key_prefix = prefix
        return
    if _template is not None:
        point_at(ALIAS, _template.plain)
    yield


def small_fleet_for(request):
    """The SeedResult of the session's seed when the test runs on the seeded copy (its site
    read afresh), else a fleet seeded now."""
    from devtools.services.fleet_seed import seed_fleet
    from fleet.models import Site

    if _template is not None and database_name(ALIAS) == _template.seeded:
        return replace(_template.result, site=Site.objects.get(pk=_template.result.site.pk))
    return seed_fleet(gpus=FLEET_GPUS)
