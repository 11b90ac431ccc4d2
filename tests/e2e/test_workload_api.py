"""Upstream 1.36's workload-aware scheduling API on the local control plane, and the operator beside it.

``tools/localcluster.py`` runs kube-apiserver with the GenericWorkload feature gate and
``--runtime-config=scheduling.k8s.io/v1alpha2=true``, so it serves Workload and PodGroup and keeps a pod's
``spec.schedulingGroup``; kube-controller-manager runs with the gate too (its podgroup-protection controller
lifts the finalizer admission puts on every PodGroup). The operator finds the API by discovery at start-up and
lists and watches both kinds into ``cache.objects``. It exposes nothing about PodGroups yet (no endpoint, no
status, no event: gangs come later), so what is observed here is that it keeps working with them: its log
says nothing about the API being absent (neither our discovery's line nor kopf's "unresolved resources"), it
stays alive through PodGroup creations and deletions listed and watched, and a plain pod binds meanwhile.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    create_pods,
    kubectl,
    pod_manifest,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)

GROUP, VERSION = "scheduling.k8s.io", "v1alpha2"


def _workload(name: str) -> dict[str, Any]:
    template = {"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {"podGroupTemplates": [template]},
    }


def _podgroup(name: str, workload: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "podGroupTemplateRef": {"workload": {"workloadName": workload, "podGroupTemplateName": "workers"}},
            "schedulingPolicy": {"gang": {"minCount": 2}},
        },
    }


def _get(cluster: Cluster, path: str) -> Any:
    """A raw GET (``kubectl get --raw``): the Python client knows neither the group nor the pod field."""
    done = kubectl(cluster.kubeconfig, "get", "--raw", path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_control_plane_serves_the_workload_api_and_keeps_scheduling_groups(
    cluster: Cluster, namespace: str
) -> None:
    found = _get(cluster, f"/apis/{GROUP}/{VERSION}")  # what the operator's discovery asks
    assert {"workloads", "podgroups"} <= {r["name"] for r in found["resources"]}
    objects = client.CustomObjectsApi(cluster.api)
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "workloads", _workload("w"))
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups", _podgroup("g", "w"))
    spec = {"schedulingGroup": {"podGroupName": "g"}}
    cluster.core.create_namespaced_pod(namespace, pod_manifest("member", "nobody-hosts-this", spec=spec))
    # Kept: the GenericWorkload gate is on.
    pod = _get(cluster, f"/api/v1/namespaces/{namespace}/pods/member")
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "g"}


def test_the_operator_lists_and_watches_podgroups_and_still_binds_a_plain_pod(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
) -> None:
    objects = client.CustomObjectsApi(cluster.api)
    labels = {"e2e-group": secrets.token_hex(4)}
    node = kwok_nodes(cpu="4", memory="16Gi", labels=labels)
    profile = profiles({})
    # Before the operator starts: listed by its reconciling LIST.
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "workloads", _workload("w"))
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups", _podgroup("listed", "w"))
    member = pod_manifest(
        "member", profile, cpu="100m", node_selector=labels, spec={"schedulingGroup": {"podGroupName": "listed"}}
    )
    create_pods(cluster.core, namespace, [member])

    operator = operator_factory()
    wait_profile_status(cluster.api, profile, ready=True)
    operator.wait_log("cache reconciled")
    # While it runs: watched (added, then deleted; the protection finalizer goes once no pod names it).
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups", _podgroup("watched", "w"))
    objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups", "watched")

    create_pods(cluster.core, namespace, [pod_manifest("plain", profile, cpu="100m", node_selector=labels)])
    assert wait_pods_bound(cluster.core, namespace, ["plain"], timeout=60) == {"plain": node}

    def podgroup_gone() -> bool:
        names = objects.list_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups")["items"]
        return "watched" not in {item["metadata"]["name"] for item in names}

    wait_for(podgroup_gone, timeout=30, message="PodGroup 'watched' was not deleted")
    assert operator.alive()
    assert operator.log_lines("does not serve scheduling.k8s.io") == []
    assert operator.log_lines("discovery of scheduling.k8s.io") == []
    assert operator.log_lines("Unresolved resources") == []  # kopf found both kinds served too
    assert operator.log_lines("Traceback") == []
