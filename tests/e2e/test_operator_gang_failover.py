"""Two replicas under kopf peering, gangs pending, and the active replica SIGKILLed: no gang is left partly bound.

Two gangs of eight, one CPU each, on nodes with room for seven:

- ``parked``: a profile with GangScheduling and an HTTP extender (served by this test; it keeps every node). Such
  a profile takes the per-pod cycle (the extender's calls are awaited there), so seven members are assumed one by
  one and wait at GangScheduling's Permit for the quorum, holding their room on the node; the eighth fits nowhere.
  ``/explain`` of the active replica shows the seven waiting at Permit when the replica is killed.
- ``grouped``: a profile with GangScheduling only: its pod-group cycle finds no quorum and places nobody, so the
  gang waits whole in the queue.

The assumptions and Permit waits of the killed replica die with it; the Binding API knows nothing of them. What
is checked: at the kill and after the standby took over, no member of either gang is bound (the standby parks
the seven again: its /explain shows them waiting at Permit); then a node with room appears and both gangs bind
whole, each member exactly once (one ``Scheduled`` event each), the pod-group gang in one cycle.

Upstream's five-minute Permit timeout is not waited for: the gang that waits is completed by the new node long
before (the test's time bound is the peering lifetime plus the scheduling).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.conformance.extender_harness import ExtenderServer
from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    operator_command,
    pod_manifest,
    pod_nodes,
    scheduled_events_per_pod,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)
from tests.e2e.test_operator_gang_scheduling import GANG, GROUP, VERSION, group_cycles, pod_group

MEMBERS = 8
#: Beyond the peering lifetime (15 s): the standby's resume on a loaded 2-core box.
TAKEOVER_BOUND = 15 + 30.0


def _keep_every_node(verb: str, body: dict[str, Any]) -> Any:
    if verb != "filter":
        raise ValueError(verb)
    return {"NodeNames": body["NodeNames"], "FailedNodes": {}}


@pytest.fixture
def extender_url() -> Iterator[str]:
    server = ExtenderServer(_keep_every_node).start()
    try:
        yield server.url
    finally:
        server.stop()


def _explain(operator: OperatorProcess, namespace: str, pod: str) -> dict[str, Any] | None:
    """``kopf-scheduler explain --json`` against one replica's /explain; None when it has no account."""
    url = f"https://127.0.0.1:{operator.metrics_port}"
    command = [*operator_command(), "explain", f"{namespace}/{pod}", "--url", url, "--insecure-skip-tls-verify"]
    command += ["--kubeconfig", str(operator.kubeconfig), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    return json.loads(done.stdout) if done.returncode == 0 else None


def _waiting_at_permit(operator: OperatorProcess, namespace: str, pod: str) -> int:
    """How many members of ``pod``'s group wait at Permit in that replica (its /explain podGroup section)."""
    account = _explain(operator, namespace, pod) or {}
    return int(((account.get("podGroup") or {}).get("waitingAtPermit") or {}).get("count") or 0)


def _members(prefix: str) -> list[str]:
    return [f"{prefix}-{i}" for i in range(MEMBERS)]


def test_sigkill_of_the_active_replica_while_a_gang_waits_at_permit_leaves_no_partial_gang(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    extender_url: str,
) -> None:
    token = secrets.token_hex(4)
    labels = {gang: {f"e2e-{gang}": token} for gang in ("parked", "grouped")}
    for gang in labels:  # room for seven of its eight members, one CPU each
        kwok_nodes(cpu="7500m", memory="32Gi", labels=labels[gang])
    active = operator_factory(100, name="active")
    standby = operator_factory(50, name="standby")
    extender = {"urlPrefix": extender_url, "filterVerb": "filter", "nodeCacheCapable": True, "httpTimeout": "5s"}
    per_pod = profiles({**GANG, "extenders": [extender]}, suffix="parked")
    grouped = profiles(GANG, suffix="grouped")
    for profile in (per_pod, grouped):
        wait_profile_status(cluster.api, profile, ready=True)
    active.wait_log("cache reconciled")

    objects = client.CustomObjectsApi(cluster.api)
    pods = []
    for gang, profile in (("parked", per_pod), ("grouped", grouped)):
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups", pod_group(gang, MEMBERS))
        spec = {"schedulingGroup": {"podGroupName": gang}}
        pods += [pod_manifest(name, profile, cpu="1", node_selector=labels[gang], spec=spec) for name in _members(gang)]
    create_pods(cluster.core, namespace, pods)
    everyone = [*_members("parked"), *_members("grouped")]

    # Seven of "parked" wait at Permit in the active replica, holding their room; nobody is bound.
    wait_for(
        lambda: _waiting_at_permit(active, namespace, "parked-0") == MEMBERS - 1,
        timeout=60,
        interval=1.0,
        message=lambda: f"not 7 waiting at Permit\n{active.log_tail()}",
    )
    assert active.log_lines("Successfully scheduled a pod group") == []
    killed_at = time.monotonic()
    active.kill()
    assert pod_nodes(cluster.core, namespace) == dict.fromkeys(everyone)

    # The standby takes over and parks the seven again; still nobody bound.
    wait_for(
        lambda: _waiting_at_permit(standby, namespace, "parked-0") == MEMBERS - 1,
        timeout=TAKEOVER_BOUND,
        interval=1.0,
        message=lambda: f"the standby did not take the gang over\n{standby.log_tail()}",
    )
    takeover = time.monotonic() - killed_at
    time.sleep(3)  # some more of the standby's cycles (the grouped gang's retries included)
    assert pod_nodes(cluster.core, namespace) == dict.fromkeys(everyone)

    # Room for the eighth of each gang: both bind whole, every member once.
    kwok_nodes(cpu="2", memory="32Gi", labels={**labels["parked"], **labels["grouped"]})
    final = wait_pods_bound(cluster.core, namespace, everyone, timeout=90)
    bound_at = time.monotonic() - killed_at
    print(f"\ntakeover {takeover:.1f}s after SIGKILL; both gangs bound {bound_at:.1f}s after it")
    assert set(final) == set(everyone)

    def every_member_reported() -> Any:
        counts = scheduled_events_per_pod(cluster.api, namespace)
        return counts if set(counts) >= set(everyone) else None

    counts = wait_for(every_member_reported, timeout=30, message="a member has no Scheduled event")
    assert max(counts.values()) == 1, counts
    [line] = wait_for(lambda: group_cycles(standby, namespace, "grouped"), timeout=10, message="no group cycle")
    assert line.endswith(f"scheduledPods={MEMBERS} unschedulablePods=0"), line
    assert standby.scheduled_count() == 2 * MEMBERS
    assert standby.log_lines("Traceback") == []
