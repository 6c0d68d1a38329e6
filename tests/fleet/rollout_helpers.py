"""Playing the node agents' part in rollout tests, through the agent API."""

from django.utils import timezone

from fleet.models import Node, NodeAgentAction

from .software_helpers import agent_client, report_stack, stamp

OLD_DRIVER = "550.127.08"
NEW = {"gpu_driver": "570.133.20", "fabric_manager": "570.133.20"}


def report_old_stacks(nodes):
    for node in nodes:
        report_stack(node, gpu_driver=(OLD_DRIVER, "ok"), fabric_manager=(OLD_DRIVER, "ok"))


def play_agents(nodes, *, fail_upgrade=(), fail_validation=()):
    """Every node's agent finishes its pending work: upgrades install the versions asked (or fail
    for hostnames in `fail_upgrade`), DCGM r3 runs report the gate's checks."""
    hosts = {n.pk: n.hostname for n in nodes}
    for action in NodeAgentAction.objects.filter(node_id__in=list(hosts), state="pending").select_related("node"):
        node = action.node
        client = agent_client(node)
        failed = (action.action == "upgrade" and node.hostname in fail_upgrade) or (
            action.action == "dcgm_r3" and node.hostname in fail_validation
        )
        status = "failed" if failed else "succeeded"
        body = {"action_id": str(action.pk), "action": action.action, "status": status, "detail": f"{status} (test)"}
        assert client.post("/api/agent/v1/action-results", body, format="json").status_code == 202
        if action.action == "upgrade" and not failed:
            versions = action.params["versions"]
            report_stack(node, **{c: (v, "ok") for c, v in versions.items()})
        if action.action == "dcgm_r3":
            checks = [
                {"name": name, "status": "fail" if failed else "pass", "detail": "test"}
                for name in ("dcgm_r3", "nccl_allreduce", "ib_link")
            ]
            response = client.post(
                "/api/agent/v1/health-reports", {"observed_at": stamp(), "checks": checks}, format="json"
            )
            assert response.status_code == 202, response.content


def run_gate():
    from health.services.gate import apply_gate

    apply_gate(now=timezone.now(), actor="system:health")


def free_nodes(node_type) -> int:
    return Node.objects.filter(node_type=node_type, lifecycle="available", cordoned=False).count()
