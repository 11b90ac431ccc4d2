"""VolumeBinding end to end (issue 10): a WaitForFirstConsumer claim pulls its pod to the node of the only
fitting local PV, the PV controller (kube-controller-manager) binds the claim after our PreBind wrote the PV's
claimRef, and a pod whose claim does not exist stays Pending with upstream's text until the claim is created.
Observed from the API server.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    pod_events,
    pod_manifest,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)


def create_first_consumer_class(cluster: Cluster, prefix: str, provisioner: str) -> str:
    """A new WaitForFirstConsumer StorageClass of ``provisioner``; its name."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    body = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    client.StorageV1Api(cluster.api).create_storage_class(body)
    return name


def delete_storage_class(cluster: Cluster, name: str) -> None:
    client.StorageV1Api(cluster.api).delete_storage_class(name)


@pytest.fixture
def local_class(cluster: Cluster) -> Iterator[str]:
    """A WaitForFirstConsumer StorageClass without a provisioner (local volumes), removed afterwards."""
    name = create_first_consumer_class(cluster, "local", "kubernetes.io/no-provisioner")
    yield name
    delete_storage_class(cluster, name)


def local_pv(name: str, storage_class: str, node: str, size: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": storage_class,
            "local": {"path": "/mnt/disk"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
        },
    }


def claim(name: str, storage_class: str, size: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        },
    }


def test_a_wait_for_first_consumer_claim_pulls_its_pod_to_the_pv_and_gets_bound(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator: OperatorProcess,
    local_class: str,
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    nodes = [kwok_nodes(cpu="4", memory="16Gi", labels=labels) for _ in range(3)]
    pvs = [f"pv-{secrets.token_hex(3)}" for _ in range(2)]
    # The only PV big enough is on the last node; a small one sits on the first.
    cluster.core.create_persistent_volume(local_pv(pvs[0], local_class, nodes[0], "1Gi"))
    cluster.core.create_persistent_volume(local_pv(pvs[1], local_class, nodes[2], "10Gi"))
    try:
        cluster.core.create_namespaced_persistent_volume_claim(namespace, claim("data", local_class, "5Gi"))
        name = profiles({})
        wait_profile_status(cluster.api, name, ready=True)
        volume = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
        missing = {"name": "data", "persistentVolumeClaim": {"claimName": "nope"}}
        create_pods(
            cluster.core,
            namespace,
            [
                pod_manifest("db-0", name, cpu="100m", node_selector=labels, spec={"volumes": [volume]}),
                pod_manifest("orphan", name, cpu="100m", node_selector=labels, spec={"volumes": [missing]}),
            ],
        )
        bound = wait_pods_bound(cluster.core, namespace, ["db-0"], timeout=90)
        assert bound == {"db-0": nodes[2]}, operator.log_tail()
        pvc = wait_for(
            lambda: (
                (p := cluster.core.read_namespaced_persistent_volume_claim("data", namespace)).status.phase == "Bound"
                and p
            ),
            timeout=60,
            message="the claim never became Bound",
        )
        assert pvc.spec.volume_name == pvs[1]

        failed = wait_for(
            lambda: pod_events(cluster.api, namespace, "orphan", reason="FailedScheduling"),
            timeout=30,
            message=lambda: operator.log_tail(),
        )
        assert 'persistentvolumeclaim "nope" not found' in failed[-1].note
        assert cluster.core.read_namespaced_pod("orphan", namespace).spec.node_name is None

        # The claim appears (the small PV fits it): VolumeBinding's hint requeues the pod, which follows that PV.
        cluster.core.create_namespaced_persistent_volume_claim(namespace, claim("nope", local_class, "1Gi"))
        assert wait_pods_bound(cluster.core, namespace, ["orphan"], timeout=60) == {"orphan": nodes[0]}
    finally:
        for pv in pvs:
            cluster.core.delete_persistent_volume(pv)


def test_a_claim_to_provision_gets_the_selected_node_and_an_unfinished_provisioning_fails_prebind(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator: OperatorProcess,
) -> None:
    # Nobody runs this provisioner, so the claim is never bound: PreBind must give up after bindTimeoutSeconds
    # with upstream's error, and the pod must not be bound without its volume.
    labels = {"e2e-group": secrets.token_hex(4)}
    nodes = [kwok_nodes(cpu="4", memory="16Gi", labels=labels) for _ in range(2)]
    class_name = create_first_consumer_class(cluster, "remote", "example.com/nobody")
    try:
        cluster.core.create_namespaced_persistent_volume_claim(namespace, claim("data", class_name, "1Gi"))
        name = profiles({"pluginConfig": [{"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 2}}]})
        wait_profile_status(cluster.api, name, ready=True)
        volume = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
        create_pods(
            cluster.core,
            namespace,
            [pod_manifest("app", name, cpu="100m", node_selector=labels, spec={"volumes": [volume]})],
        )
        selected = wait_for(
            lambda: (
                cluster.core.read_namespaced_persistent_volume_claim("data", namespace).metadata.annotations or {}
            ).get("volume.kubernetes.io/selected-node"),
            timeout=60,
            message=lambda: operator.log_tail(),
        )
        assert selected in nodes
        failed = wait_for(
            lambda: pod_events(cluster.api, namespace, "app", reason="FailedScheduling"),
            timeout=60,
            message=lambda: operator.log_tail(),
        )
        assert 'running PreBind plugin "VolumeBinding": binding volumes: context deadline exceeded' in failed[-1].note
        assert cluster.core.read_namespaced_pod("app", namespace).spec.node_name is None
    finally:
        delete_storage_class(cluster, class_name)


def test_a_stateful_set_with_volume_claim_templates_follows_its_local_pvs(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator: OperatorProcess,
    local_class: str,
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    nodes = [kwok_nodes(cpu="4", memory="16Gi", labels=labels) for _ in range(3)]
    pvs = {f"pv-{secrets.token_hex(3)}": node for node in nodes[1:]}  # no PV on the first node
    for pv, node in pvs.items():
        cluster.core.create_persistent_volume(local_pv(pv, local_class, node, "2Gi"))
    try:
        name = profiles({})
        wait_profile_status(cluster.api, name, ready=True)
        pod_spec = pod_manifest("ignored", name, cpu="100m", node_selector=labels)["spec"]
        pod_spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        template = {"metadata": {"labels": {"app": "db"}}, "spec": pod_spec}
        claim_template = {k: v for k, v in claim("data", local_class, "1Gi").items() if k in ("metadata", "spec")}
        cluster.apps.create_namespaced_stateful_set(
            namespace,
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": "db"},
                "spec": {
                    "replicas": 2,
                    "serviceName": "db",
                    "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {"app": "db"}},
                    "template": template,
                    "volumeClaimTemplates": [claim_template],
                },
            },
        )
        bound = wait_pods_bound(cluster.core, namespace, ["db-0", "db-1"], timeout=90)
        assert sorted(bound.values()) == sorted(pvs.values()), operator.log_tail()
        for pod, node in bound.items():
            pvc = wait_for(
                lambda pod=pod: (
                    (c := cluster.core.read_namespaced_persistent_volume_claim(f"data-{pod}", namespace)).status.phase
                    == "Bound"
                    and c
                ),
                timeout=60,
                message=f"data-{pod} never became Bound",
            )
            assert pvs[pvc.spec.volume_name] == node
    finally:
        for pv in pvs:
            cluster.core.delete_persistent_volume(pv)


def zonal_pv(name: str, zone: str, claim_namespace: str, claim_name: str) -> dict[str, Any]:
    """A pre-bound cloud-style disk: zone label (VolumeZone) and zone node affinity (VolumeBinding)."""
    term = {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "csi": {"driver": "disk.example.com", "volumeHandle": name},
            "claimRef": {"namespace": claim_namespace, "name": claim_name},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
        },
    }


def test_a_claim_bound_to_a_zonal_pv_pulls_its_pod_to_that_zone_and_an_unreachable_zone_waits(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator: OperatorProcess,
) -> None:
    group = secrets.token_hex(4)
    zones = {
        f"zone-{z}-{group}": kwok_nodes(
            cpu="4", memory="16Gi", labels={"e2e-group": group, "topology.kubernetes.io/zone": f"zone-{z}-{group}"}
        )
        for z in "abc"
    }
    wanted_zone = sorted(zones)[1]
    nowhere = f"zone-x-{group}"  # no node of this group is in it
    near_pv, far_pv = (f"pv-{secrets.token_hex(3)}" for _ in range(2))
    pvs = {near_pv: (wanted_zone, "data"), far_pv: (nowhere, "far")}
    for pv, (zone, claim_name) in pvs.items():
        cluster.core.create_persistent_volume(zonal_pv(pv, zone, namespace, claim_name))
    try:
        for pv, (_, claim_name) in pvs.items():
            body = claim(claim_name, "", "1Gi")
            body["spec"]["volumeName"] = pv
            cluster.core.create_namespaced_persistent_volume_claim(namespace, body)
        for claim_name in ("data", "far"):
            wait_for(
                lambda c=claim_name: (
                    cluster.core.read_namespaced_persistent_volume_claim(c, namespace).status.phase == "Bound"
                ),
                timeout=60,
                message=f"the PV controller never bound {claim_name}",
            )
        name = profiles({})
        wait_profile_status(cluster.api, name, ready=True)
        selector = {"e2e-group": group}
        create_pods(
            cluster.core,
            namespace,
            [
                pod_manifest(
                    pod,
                    name,
                    cpu="100m",
                    node_selector=selector,
                    spec={"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim_name}}]},
                )
                for pod, claim_name in (("near", "data"), ("stranded", "far"))
            ],
        )
        assert wait_pods_bound(cluster.core, namespace, ["near"], timeout=60) == {"near": zones[wanted_zone]}, (
            operator.log_tail()
        )
        failed = wait_for(
            lambda: pod_events(cluster.api, namespace, "stranded", reason="FailedScheduling"),
            timeout=30,
            message=lambda: operator.log_tail(),
        )
        # VolumeBinding runs before VolumeZone in the default profile, so its reason names the group's nodes.
        assert "3 node(s) didn't match PersistentVolume's node affinity" in failed[-1].note, failed[-1].note
        assert cluster.core.read_namespaced_pod("stranded", namespace).spec.node_name is None
    finally:
        for claim_name in ("data", "far"):
            cluster.core.delete_namespaced_persistent_volume_claim(claim_name, namespace)
        for pv in pvs:
            cluster.core.delete_persistent_volume(pv)


def test_an_operator_killed_during_prebind_leaves_no_pod_bound_without_its_volume_and_the_next_finishes(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
) -> None:
    # A provisioner class nobody serves until the test plays the provisioner: PreBind writes the selected-node
    # annotation and waits (bindTimeoutSeconds is long); the operator is SIGKILLed there.
    labels = {"e2e-group": secrets.token_hex(4)}
    nodes = [kwok_nodes(cpu="4", memory="16Gi", labels=labels) for _ in range(2)]
    class_name = create_first_consumer_class(cluster, "late", "example.com/late")
    pv_name = f"pv-{secrets.token_hex(3)}"
    try:
        first = operator_factory(100, name="first")
        cluster.core.create_namespaced_persistent_volume_claim(namespace, claim("data", class_name, "1Gi"))
        name = profiles({"pluginConfig": [{"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 300}}]})
        wait_profile_status(cluster.api, name, ready=True)
        volume = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
        create_pods(
            cluster.core,
            namespace,
            [pod_manifest("app", name, cpu="100m", node_selector=labels, spec={"volumes": [volume]})],
        )

        def selected_node() -> str | None:
            annotations = cluster.core.read_namespaced_persistent_volume_claim("data", namespace).metadata.annotations
            return (annotations or {}).get("volume.kubernetes.io/selected-node")

        chosen = wait_for(selected_node, timeout=60, message=lambda: first.log_tail())
        assert chosen in nodes
        first.kill()  # mid-PreBind: the claim is annotated, the pod not bound
        assert cluster.core.read_namespaced_pod("app", namespace).spec.node_name is None

        second = operator_factory(200, name="second")
        second.wait_log("cache reconciled", timeout=60)
        # No volume yet, so nothing may bind the pod.
        assert cluster.core.read_namespaced_pod("app", namespace).spec.node_name is None

        # The provisioner finishes: a PV on the selected node, pre-bound to the claim; the PV controller binds.
        pv = local_pv(pv_name, class_name, chosen, "1Gi")
        pv["spec"]["claimRef"] = {"namespace": namespace, "name": "data"}
        cluster.core.create_persistent_volume(pv)
        bound = wait_pods_bound(cluster.core, namespace, ["app"], timeout=120)
        assert bound == {"app": chosen}, second.log_tail()
        pvc = cluster.core.read_namespaced_persistent_volume_claim("data", namespace)
        assert (pvc.status.phase, pvc.spec.volume_name) == ("Bound", pv_name)
    finally:
        delete_storage_class(cluster, class_name)
        try:
            cluster.core.delete_persistent_volume(pv_name)
        except client.ApiException as e:
            if e.status != 404:
                raise
