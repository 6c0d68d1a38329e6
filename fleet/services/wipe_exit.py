"""The way back to the pool after a tenancy: a wiped node is placed again only once its stack,
as reported *after* the wipe began, passes the bring-up ladder's checks and matches its node
type's golden baseline.

A tenant with root on a bare-metal node can change anything the node's agent reads: firmware
it can flash from the host, the kernel, the driver, the agent itself. Whatever it reported
during the tenancy is its word, so only reports received since the node entered `wiping` count.
The node's identity was rotated at that moment (core.services.agent_credentials): the only
agent that can report since is the one that claimed the new identity through the provisioning
handoff, i.e. the wipe image, and BMC firmware reads, which never pass through the host. The
wipe is asked to re-image to the golden baseline (`params.versions`), so a node whose tenant
changed something comes back as the baseline or not at all.
"""

from collections import defaultdict

from fleet.choices import AgentAction, ComponentState
from fleet.models import Node, NodeSoftware, NodeType
from fleet.selectors.software import _compare, golden_baselines

from .agent_work import request_agent_actions
from .bring_up import _STATE_RANK, Verdict, _label, check_step, steps_for
from .lifecycle import state_entered_at


def request_wipes(*, nodes: list[Node], actor: str, reason: str) -> int:
    """Queue the wipe for each node, carrying its type's golden versions (the image the wipe
    restores); one INSERT per node type."""
    by_type: dict = defaultdict(list)
    for node in nodes:
        by_type[node.node_type_id].append(node)
    golden = golden_baselines(set(by_type))
    queued = 0
    for type_id, group in by_type.items():
        baseline = golden.get(type_id)
        params = {"versions": dict(baseline.versions), "baseline": baseline.name} if baseline else {}
        queued += request_agent_actions(nodes=group, action=AgentAction.WIPE, actor=actor, params=params, reason=reason)
    return queued


def return_verdicts(nodes: list[Node], wiped_at: dict | None = None) -> dict:
    """node id → Verdict ("pass", "fail" or "wait", with why) for nodes in `wiping` whose wipe
    succeeded. `wiped_at`: node id → when the agent says the wipe finished (its own clock); a
    report it stamped earlier describes the node before the re-image and does not count. Three
    queries whatever the batch size."""
    types = NodeType.objects.in_bulk({n.node_type_id for n in nodes})
    golden = golden_baselines(set(types))
    since = {n.pk: state_entered_at(n) for n in nodes}
    wiped_at = wiped_at or {}
    fresh: dict = defaultdict(list)
    for row in NodeSoftware.objects.filter(node_id__in=list(since)):
        entered, finished = since[row.node_id], wiped_at.get(row.node_id)
        if (entered is None or row.received_at >= entered) and (finished is None or row.observed_at >= finished):
            fresh[row.node_id].append(row)
    out = {}
    for node in nodes:
        rows = fresh[node.pk]
        if not rows:
            out[node.pk] = Verdict(
                "wait", "wiped; waiting for the node's new identity to report its software and firmware inventory"
            )
            continue
        stack: dict = {}
        for row in rows:
            current = stack.get(row.component)
            if current is None or _STATE_RANK[row.state] < _STATE_RANK[current.state]:
                stack[row.component] = row
        node_type = types[node.node_type_id]
        verdict = None
        for step in steps_for(node_type):
            judged = check_step(step, node_type, stack)
            if judged.outcome != "pass":
                verdict = Verdict(judged.outcome, f"after the wipe: {judged.reason}")
                break
        baseline = golden.get(node.node_type_id)
        if verdict is None and baseline is not None:
            drift = _compare(baseline.versions, [(r.component, r.version, r.state) for r in rows])
            if drift:
                shown = ", ".join(
                    f"{_label(d.component)} {d.actual or '-'}"
                    f"{'' if d.state == ComponentState.OK else f' ({d.state})'} ≠ {d.expected}"
                    for d in drift[:5]
                )
                verdict = Verdict(
                    "fail",
                    f"after the wipe the stack differs from the golden baseline {baseline.name}: {shown}; "
                    "re-image the node to the baseline and retry the wipe",
                )
        out[node.pk] = verdict or Verdict(
            "pass", "wiped; stack reported by the new identity matches " + (baseline.name if baseline else "the ladder")
        )
    return out
