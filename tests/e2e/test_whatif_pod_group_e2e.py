"""``kopf-scheduler what-if --pod-group`` against the real API server, checked against the operator's real decisions.

As tests/e2e/test_whatif_e2e.py for one pod, with a read-only identity (get and list only): a gang that fits is
predicted to be placed whole, on the node the operator then binds it to; a gang one of whose members fits nowhere is
predicted to place none, and what-if's messages are word for word the operator's afterwards: each member's
FailedScheduling note and the PodGroup's PodGroupScheduled condition.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    create_pods,
    namespace_events,
    pod_manifest,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)
from tests.e2e.test_operator_gang_scheduling import GANG, GROUP, VERSION, pod_group, pod_group_condition
from tests.e2e.test_whatif_e2e import read_only_kubeconfig, what_if  # noqa: F401 - the fixture


def _members(namespace: str, profile: str, group: str, cpus: list[str], labels: dict[str, str]) -> list[Any]:
    spec = {"schedulingGroup": {"podGroupName": group}}
    return [
        pod_manifest(f"{group}-{i}", profile, cpu=cpu, node_selector=labels, spec=spec) for i, cpu in enumerate(cpus)
    ]


def _what_if_group(kubeconfig: Path, profile: str, target: str) -> dict[str, Any]:
    done = what_if(kubeconfig, "--profile", profile, "--pod-group", target, "-o", "json")
    return dict(json.loads(done.stdout)["podGroup"])


def test_what_if_of_a_pod_group_is_the_operators_decision(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    read_only_kubeconfig: Path,  # noqa: F811 - the fixture
) -> None:
    labels = {"what-if-group": secrets.token_hex(3)}
    node = kwok_nodes(cpu="8", memory="16Gi", labels=labels)
    profile = profiles(GANG)
    objects = client.CustomObjectsApi(cluster.api)
    for name, min_count in (("fits", 3), ("toobig", 2)):
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups", pod_group(name, min_count))
    # Pending, with no operator running: what-if reads the groups and their pods from the cluster.
    create_pods(cluster.core, namespace, _members(namespace, profile, "fits", ["1", "1", "1"], labels))
    create_pods(cluster.core, namespace, _members(namespace, profile, "toobig", ["1", "9"], labels))

    fits = _what_if_group(read_only_kubeconfig, profile, f"{namespace}/fits")
    assert (fits["result"], fits["message"]) == ("Schedulable", "")
    assert {p["pod"]: p.get("node") for p in fits["pods"]} == {f"{namespace}/fits-{i}": node for i in range(3)}
    text = what_if(read_only_kubeconfig, "--profile", profile, "--pod-group", f"{namespace}/fits").stdout
    print(f"$ kopf-scheduler what-if --profile {profile} --pod-group {namespace}/fits\n{text}")
    assert text.startswith(f"PodGroup {namespace}/fits: would schedule all 3 pending pod(s) in one cycle ")

    toobig = _what_if_group(read_only_kubeconfig, profile, f"{namespace}/toobig")
    assert (toobig["result"], toobig["message"]) == (
        "Unschedulable",
        "0/1 placements are available, first placement status: pod group is unschedulable, "
        "No preemption victims found for incoming preemptor",
    )
    predicted = {p["pod"].split("/")[1]: p["message"] for p in toobig["pods"]}
    assert predicted["toobig-0"].startswith("pod group is unschedulable, ")
    assert predicted["toobig-1"].startswith(f"0/{len(cluster.core.list_node().items)} nodes are available: ")
    text = what_if(read_only_kubeconfig, "--profile", profile, "--pod-group", f"{namespace}/toobig").stdout
    print(f"$ kopf-scheduler what-if --profile {profile} --pod-group {namespace}/toobig\n{text}")

    operator_factory()
    wait_profile_status(cluster.api, profile, ready=True)
    fits_pods = [f"fits-{i}" for i in range(3)]
    assert wait_pods_bound(cluster.core, namespace, fits_pods, timeout=60) == dict.fromkeys(fits_pods, node)

    def failure_notes() -> dict[str, str] | None:
        events = namespace_events(cluster.api, namespace)
        notes = {e.regarding.name: e.note for e in events if e.reason == "FailedScheduling"}
        return notes if set(notes) >= set(predicted) else None

    notes = wait_for(failure_notes, timeout=60, message="no FailedScheduling for the members of toobig")
    assert {name: notes[name] for name in predicted} == predicted
    condition = wait_for(lambda: pod_group_condition(cluster, namespace, "toobig"), timeout=30, message="no condition")
    assert (condition["status"], condition["message"]) == ("False", toobig["message"])
