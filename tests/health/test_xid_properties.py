"""Random Xid histories per node through the ingest decoder and the sweep's decision
(health.services.ingest.heartbeat_signals → conditions → health.services.sweep.decide):
metamorphic properties, sizes 1 and 2 first."""

import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from health import xid
from health.choices import SEVERITY_RANK
from health.services.ingest import heartbeat_signals
from health.services.sweep import decide

CATALOG = xid.catalog()


def event(number: int, draw_fields: dict | None = None) -> dict:
    return {"xid": number, **(draw_fields or {})}


H100_ROWS = [r for r in CATALOG.values() if r.h100]
# Faults NVIDIA says the application caused or that need nothing: never a reason to pull.
APPLICATION = sorted(
    r.xid for r in H100_ROWS if r.immediate_action in ("RESTART_APP", "IGNORE") and not r.deferred and not r.overrides
)
# ... with the decoded events the catalogue calls application-level: 154 reporting None.
APPLICATION_EVENTS = [event(x) for x in APPLICATION] + [event(154, {"recovery_action": 0})]
# Faults that need at least a GPU reset, by the catalogue's own bucket.
FATAL = sorted(r.xid for r in H100_ROWS if r.immediate_action in ("RESET_GPU", "RESTART_BM"))


xid_event = st.one_of(
    st.builds(event, st.sampled_from(sorted(CATALOG) + [4242])),
    st.builds(
        event,
        st.just(154),
        st.fixed_dictionaries({"recovery_action": st.integers(0, 4)}),
    ),
)
# A node's history: heartbeats, each a list of (gpu, event).
heartbeat = st.lists(st.tuples(st.integers(0, 7), xid_event), min_size=1, max_size=3)
history = st.lists(heartbeat, min_size=1, max_size=4)


def conditions(node_id, beats: list) -> list[dict]:
    """What the heartbeats leave as active conditions: one per (gpu, signal), its severity the
    gravest decode seen (health.services.conditions keeps the graver)."""
    worst: dict = {}
    for beat in beats:
        gpus: dict = {}
        for index, ev in beat:
            gpus.setdefault(index, []).append(ev)
        payload = [{"index": i, "xid_events": evs} for i, evs in gpus.items()]
        for key, detail in heartbeat_signals(payload, None, gpu_family="h100").items():
            severity = detail[1] if isinstance(detail, tuple) else "info"
            if key not in worst or SEVERITY_RANK[severity] > SEVERITY_RANK[worst[key]]:
                worst[key] = severity
    return [{"node_id": node_id, "signal": s, "severity": sev, "count": 1} for (g, s), sev in worst.items()]


def outcome(rows: list[dict], tenanted=frozenset()) -> dict:
    return decide(rows, repeats=set(), tenanted=set(tenanted))


def rank(rows: list[dict], node_id) -> int:
    decided = outcome(rows).get(node_id)
    held = max((SEVERITY_RANK[r["severity"]] for r in rows if r["node_id"] == node_id), default=0)
    return max(SEVERITY_RANK[decided[0]] if decided else 0, held)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 7), st.sampled_from(APPLICATION_EVENTS)), min_size=1, max_size=3),
        min_size=1,
        max_size=4,
    )
)
@example([[(0, event(13))]])  # size 1
@example([[(0, event(13))], [(0, event(13))]])  # size 2: the same application Xid twice on one GPU
def test_an_application_only_history_never_pulls_or_holds_a_node(beats):
    rows = conditions("n1", beats)
    assert outcome(rows) == {}
    assert all(r["severity"] == "info" for r in rows)


@settings(max_examples=200, deadline=None)
@given(history, st.integers(0, 7), st.sampled_from(FATAL), st.integers(0, 3))
@example([[(0, event(13))]], 0, 79, 0)  # size 1
@example([[(0, event(154, {"recovery_action": 0})), (0, event(94))]], 1, 62, 0)  # size 2
def test_adding_a_reset_or_reboot_xid_never_makes_the_outcome_milder(beats, gpu_index, fatal, at):
    before = conditions("n1", beats)
    worse = [list(b) for b in beats]
    worse[min(at, len(worse) - 1)].append((gpu_index, event(fatal)))
    after = conditions("n1", worse)
    assert rank(after, "n1") >= rank(before, "n1")
    assert "n1" in outcome(after)  # and the node is pulled: a GPU that needs a reset takes no work
    assert SEVERITY_RANK[outcome(after)["n1"][0]] >= SEVERITY_RANK[CATALOG[fatal].severity]


@settings(max_examples=100, deadline=None)
@given(st.lists(history, min_size=1, max_size=2), st.randoms(use_true_random=False))
@example([[[(0, event(79))]]], random.Random(0))  # size 1
@example([[[(0, event(13))]], [[(1, event(4242))]]], random.Random(1))  # size 2
def test_the_order_of_independent_nodes_does_not_matter(histories, rnd):
    rows = [row for i, beats in enumerate(histories) for row in conditions(f"n{i}", beats)]
    alone = {}
    for i, beats in enumerate(histories):
        alone.update(outcome(conditions(f"n{i}", beats)))
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    assert outcome(shuffled) == outcome(rows) == alone


@settings(max_examples=100, deadline=None)
@given(history)
def test_a_tenant_never_makes_the_node_pulled_for_less_and_defer_waits_for_release(beats):
    rows = conditions("n1", beats)
    free, busy = outcome(rows).get("n1"), outcome(rows, tenanted={"n1"}).get("n1")
    if busy:
        assert free == busy  # a tenant changes nothing for a real fault
    if free and not busy:  # only a deferred reset waits for the tenant to leave
        assert free[0] == "reset" and all(r["severity"] in ("info", "warn", "defer") for r in rows), rows
