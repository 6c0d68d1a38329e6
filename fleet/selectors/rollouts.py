"""Reads of rolling upgrades: the list with per-state counts, one rollout with its nodes."""

from collections import defaultdict

from django.db.models import Count

from fleet.models import Rollout, RolloutNode

__all__ = ["rollout_detail", "rollouts_with_counts"]


def rollouts_with_counts(limit: int = 200) -> list[Rollout]:
    """Newest first, each with `.counts` (nodes per state). Two queries."""
    rollouts = list(Rollout.objects.select_related("baseline__node_type").order_by("-created_at")[:limit])
    counts: dict = defaultdict(dict)
    for row in (
        RolloutNode.objects.filter(rollout__in=rollouts)
        .values("rollout_id", "state")
        .annotate(n=Count("id"))
        .order_by()
    ):
        counts[row["rollout_id"]][row["state"]] = row["n"]
    for rollout in rollouts:
        rollout.counts = counts[rollout.pk]
    return rollouts


def rollout_detail(rollout_id) -> Rollout | None:
    """One rollout with `.counts`, `.entries` (its nodes by wave) and `.waves`
    ([(wave, [entries])]). Two queries."""
    rollout = Rollout.objects.select_related("baseline__node_type").filter(pk=rollout_id).first()
    if rollout is None:
        return None
    rollout.entries = list(
        RolloutNode.objects.filter(rollout=rollout).select_related("node").order_by("wave", "node__hostname")
    )
    rollout.counts = defaultdict(int)
    waves: dict = defaultdict(list)
    for entry in rollout.entries:
        rollout.counts[entry.state] += 1
        waves[entry.wave].append(entry)
    rollout.counts = dict(rollout.counts)
    rollout.waves = sorted(waves.items())
    rollout.failures = [e for e in rollout.entries if e.state == "failed"]
    return rollout
