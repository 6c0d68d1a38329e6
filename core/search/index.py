"""Keeping the search index in step (core.models.SearchEntry).

Every save and delete of a registered model reaches the index through post_save/post_delete,
connected once per model at registration: services, the admin's forms and the inventory
import's per-row updates all save through the ORM, so no write path has to remember the index.
What bypasses signals — bulk_create/bulk_update in the inventory import, drive inventory,
incident creation, invoice numbering, the seed — calls `index_objects()` itself; `rebuild()`
(`manage.py rebuild_search_index`) rewrites everything from the source tables.

Control-plane objects are indexed in the same transaction as their own write, so a rolled-back
rename leaves no trace. Objects in another database (the ledger's invoices) are indexed after
that database commits; if the control-plane database cannot take the write then, the miss is
logged and the next rebuild repairs it — a search may lag, a billing run never fails for it.
"""

import logging
from collections import defaultdict

from django.db import DatabaseError, transaction
from django.db.models.signals import post_delete, post_save

from core.models import SearchEntry

from .registry import MODELS, SearchModel

logger = logging.getLogger(__name__)
BATCH = 5000


def _upsert(rows: list[SearchEntry]) -> None:
    SearchEntry.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["kind", "object_id"], update_fields=["value"], batch_size=BATCH
    )


def _write(entry: SearchModel, instances: list, *, created: bool) -> None:
    rows, blank = [], defaultdict(list)
    for instance in instances:
        values = entry.values(instance)
        object_id = str(instance.pk)
        for kind in entry.kinds:
            if kind.name in values:
                rows.append(SearchEntry(kind=kind.name, object_id=object_id, value=values[kind.name]))
            elif not created:  # an identifier that was cleared leaves the index
                blank[kind.name].append(object_id)
    if rows and created:
        # new objects have no entries yet, and a rebuild cannot see them before this commits:
        # a plain insert, cheaper than the upsert on the seed's and the import's bulk paths
        SearchEntry.objects.bulk_create(rows, batch_size=BATCH)
    elif rows:
        _upsert(rows)
    for kind_name, ids in blank.items():
        SearchEntry.objects.filter(kind=kind_name, object_id__in=ids).delete()


def _after_commit_of(alias: str, work) -> None:
    def guarded():
        try:
            with transaction.atomic():
                work()
        except DatabaseError:
            logger.warning(
                "search index not updated (control-plane database unavailable); rebuild_search_index repairs it"
            )

    transaction.on_commit(guarded, using=alias)


def index_objects(instances, *, created: bool = False) -> None:
    """Write the identifiers of `instances` (saved objects of one or more registered models)
    to the index; for paths that bypass post_save (bulk_create, bulk_update). `created=True`
    skips clearing blank identifiers (a new object has none in the index yet)."""
    by_model: dict = defaultdict(list)
    for instance in instances:
        by_model[type(instance)].append(instance)
    for model, group in by_model.items():
        entry = MODELS[model]
        alias = group[0]._state.db or entry.using
        if alias == "default":
            _write(entry, group, created=created)
        else:
            _after_commit_of(alias, lambda entry=entry, group=group: _write(entry, group, created=created))


def remove_objects(model, object_ids) -> None:
    """Drop every identifier of these objects from the index."""
    entry = MODELS[model]
    ids = [str(pk) for pk in object_ids]
    work = lambda: SearchEntry.objects.filter(kind__in=[k.name for k in entry.kinds], object_id__in=ids).delete()
    if entry.using == "default":
        work()
    else:
        _after_commit_of(entry.using, work)


def _on_save(sender, instance, created, raw=False, update_fields=None, **kwargs):
    if raw:  # loaddata: the rebuild indexes fixtures
        return
    entry = MODELS[sender]
    if not created and not entry.watched:
        return  # indexed only by its own id, which never changes
    if update_fields is not None and not (entry.watched & set(update_fields)):
        return  # a heartbeat or a state change: no identifier moved
    index_objects([instance], created=created)


def _on_delete(sender, instance, **kwargs):
    remove_objects(sender, [instance.pk])


def connect(entry: SearchModel) -> None:
    uid = f"core.search:{entry.model._meta.label_lower}"
    post_save.connect(_on_save, sender=entry.model, dispatch_uid=uid, weak=False)
    post_delete.connect(_on_delete, sender=entry.model, dispatch_uid=uid, weak=False)


def rebuild(models=None, *, batch: int = BATCH) -> dict[str, int]:
    """Rewrite the index from the source tables (all registered models, or those given), in one
    control-plane transaction: searches see the old index until it commits. Returns the number
    of entries written per kind."""
    counts: dict[str, int] = {}
    entries = [MODELS[m] for m in models] if models else list(MODELS.values())
    with transaction.atomic():
        for entry in entries:
            kind_names = [k.name for k in entry.kinds]
            SearchEntry.objects.filter(kind__in=kind_names).delete()
            attributes = [k.attribute for k in entry.kinds]
            source = entry.model._default_manager.using(entry.using).values_list("pk", *attributes)
            counts.update(dict.fromkeys(kind_names, 0))
            rows: list[SearchEntry] = []
            for pk, *raw_values in source.iterator(chunk_size=batch):
                for kind, raw in zip(entry.kinds, raw_values):
                    value = entry.normalised(raw)
                    if value:
                        rows.append(SearchEntry(kind=kind.name, object_id=str(pk), value=value))
                        counts[kind.name] += 1
                if len(rows) >= batch:
                    _upsert(rows)  # an upsert: a save committed meanwhile may have written the same row
                    rows = []
            if rows:
                _upsert(rows)
    return counts
