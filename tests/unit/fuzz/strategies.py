"""Hypothesis strategies: API-shaped nodes, pods and SchedulerProfile specs over small shared vocabularies.

The vocabularies (node names, label keys and values, taint keys, host ports, images, resource names) are small
on purpose: a pod's selector, affinity term, toleration or host port then matches some node or pod often
enough for the plugins' interesting branches to run, and a shrunk failure reads like a manifest. Objects are
what the API server would accept and serve (its validation and defaulting done): requests at most their limits,
extended resources and hugepages with requests equal to limits, sidecars as restartable init containers,
``minDomains`` only with DoNotSchedule, unique container names.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

NODE_NAMES = tuple(f"n{i}" for i in range(5))
NAMESPACES = ("default", "other")
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
HOSTNAME = "kubernetes.io/hostname"
GPU = "example.com/gpu"
HUGEPAGES = "hugepages-2Mi"
#: Label keys of nodes and pods (``disk`` and ``tier`` are shared; ``rank`` is numeric for Gt/Lt).
NODE_LABEL_KEYS = ("disk", "tier", "rank")
POD_LABEL_KEYS = ("app", "tier")
LABEL_VALUES = ("a", "b", "c")
TAINT_KEYS = ("dedicated", "gpu", "node.kubernetes.io/unschedulable")
TOPOLOGY_KEYS = (HOSTNAME, ZONE, REGION, "tier")
IMAGES = ("registry.k8s.io/pause:3.10", "docker.io/library/nginx:1.27", "ghcr.io/example/big:1")
GATES = ("example.com/wait", "example.com/quota")
FEATURES = ("InPlacePodVerticalScaling", "GuaranteedQoSPodCPUResize")
#: Profiles the pods may name: two live ones (the tests create them), one never created.
SCHEDULERS = ("sp", "sp2", "nobody")

_uid_counter = itertools.count()


def fresh_name() -> str:
    """A pod name no other pod of the run has (names are unique across namespaces too, which keeps the API
    model's lookups by name simple)."""
    return f"p{next(_uid_counter)}"


# -- quantities ----------------------------------------------------------------------------------------------
cpu = st.sampled_from(["0", "1m", "100m", "250m", "500m", "1", "1500m", "2", "4"])
memory = st.sampled_from(["0", "1", "64Mi", "256Mi", "1Gi", "2Gi", "8Gi"])
ephemeral = st.sampled_from(["0", "1Gi", "10Gi"])
small_count = st.integers(min_value=0, max_value=4)


@st.composite
def resources(draw: st.DrawFn) -> dict[str, Any]:
    """A container's ``resources``: requests ≤ limits; extended resources and hugepages with requests = limits."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    for name, values in (("cpu", cpu), ("memory", memory), ("ephemeral-storage", ephemeral)):
        if draw(st.booleans()):
            requests[name] = draw(values)
            if draw(st.booleans()):
                limits[name] = requests[name]
    if draw(st.integers(0, 4)) == 0:
        limits[GPU] = requests[GPU] = draw(small_count)
    if draw(st.integers(0, 6)) == 0:
        limits[HUGEPAGES] = requests[HUGEPAGES] = draw(st.sampled_from(["2Mi", "4Mi"]))
    found: dict[str, Any] = {}
    if requests:
        found["requests"] = requests
    if limits:
        found["limits"] = limits
    return found


@st.composite
def container(draw: st.DrawFn, name: str, *, sidecar: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": draw(st.sampled_from(IMAGES))}
    res = draw(resources())
    if res:
        body["resources"] = res
    if draw(st.integers(0, 3)) == 0:
        port = {"containerPort": 80, "hostPort": draw(st.sampled_from([8080, 8081])), "protocol": "TCP"}
        port["protocol"] = draw(st.sampled_from(["TCP", "UDP"]))
        if draw(st.booleans()):
            port["hostIP"] = draw(st.sampled_from(["0.0.0.0", "10.0.0.1"]))
        body["ports"] = [port]
    if sidecar:
        body["restartPolicy"] = "Always"
    return body


# -- labels, selectors, terms --------------------------------------------------------------------------------
pod_labels = st.dictionaries(st.sampled_from(POD_LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2)


@st.composite
def label_selector(draw: st.DrawFn) -> dict[str, Any]:
    selector: dict[str, Any] = {}
    labels = draw(pod_labels)
    if labels:
        selector["matchLabels"] = labels
    if draw(st.booleans()):
        operator = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
        expression: dict[str, Any] = {"key": draw(st.sampled_from(POD_LABEL_KEYS)), "operator": operator}
        if operator in ("In", "NotIn"):
            expression["values"] = draw(st.lists(st.sampled_from(LABEL_VALUES), min_size=1, max_size=2, unique=True))
        selector["matchExpressions"] = [expression]
    return selector


@st.composite
def node_selector_requirement(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(st.sampled_from((*NODE_LABEL_KEYS, ZONE, HOSTNAME)))
    operator = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    requirement: dict[str, Any] = {"key": key, "operator": operator}
    if operator in ("In", "NotIn"):
        pool = NODE_NAMES if key == HOSTNAME else LABEL_VALUES
        requirement["values"] = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True))
    elif operator in ("Gt", "Lt"):
        requirement["key"] = "rank"
        requirement["values"] = [str(draw(st.integers(0, 4)))]
    return requirement


@st.composite
def node_selector_term(draw: st.DrawFn) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": draw(st.lists(node_selector_requirement(), min_size=1, max_size=2))}
    if draw(st.integers(0, 4)) == 0:
        term["matchFields"] = [
            {"key": "metadata.name", "operator": "In", "values": [draw(st.sampled_from(NODE_NAMES))]}
        ]
    return term


@st.composite
def pod_affinity_term(draw: st.DrawFn) -> dict[str, Any]:
    term: dict[str, Any] = {
        "labelSelector": draw(label_selector()),
        "topologyKey": draw(st.sampled_from(TOPOLOGY_KEYS)),
    }
    choice = draw(st.integers(0, 5))
    if choice == 0:
        term["namespaces"] = draw(st.lists(st.sampled_from(NAMESPACES), min_size=1, max_size=2, unique=True))
    elif choice == 1:
        term["namespaceSelector"] = {}
    if draw(st.integers(0, 5)) == 0:
        term["matchLabelKeys"] = ["app"]
    return term


@st.composite
def affinity(draw: st.DrawFn) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if draw(st.booleans()):
        node: dict[str, Any] = {}
        if draw(st.booleans()):
            terms = draw(st.lists(node_selector_term(), min_size=1, max_size=2))
            node["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
        if draw(st.booleans()):
            node["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": draw(st.integers(1, 100)), "preference": draw(node_selector_term())}
            ]
        if node:
            found["nodeAffinity"] = node
    for kind in ("podAffinity", "podAntiAffinity"):
        if draw(st.integers(0, 2)) == 0:
            body: dict[str, Any] = {}
            if draw(st.booleans()):
                body["requiredDuringSchedulingIgnoredDuringExecution"] = [draw(pod_affinity_term())]
            if draw(st.booleans()):
                body["preferredDuringSchedulingIgnoredDuringExecution"] = [
                    {"weight": draw(st.integers(1, 100)), "podAffinityTerm": draw(pod_affinity_term())}
                ]
            if body:
                found[kind] = body
    return found


@st.composite
def spread_constraint(draw: st.DrawFn) -> dict[str, Any]:
    when = draw(st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]))
    constraint: dict[str, Any] = {
        "maxSkew": draw(st.integers(1, 2)),
        "topologyKey": draw(st.sampled_from(TOPOLOGY_KEYS)),
        "whenUnsatisfiable": when,
        "labelSelector": draw(label_selector()),
    }
    if when == "DoNotSchedule" and draw(st.integers(0, 3)) == 0:
        constraint["minDomains"] = draw(st.integers(1, 3))
    if draw(st.integers(0, 3)) == 0:
        constraint["nodeAffinityPolicy"] = draw(st.sampled_from(["Honor", "Ignore"]))
        constraint["nodeTaintsPolicy"] = draw(st.sampled_from(["Honor", "Ignore"]))
    if draw(st.integers(0, 4)) == 0:
        constraint["matchLabelKeys"] = ["app"]
    return constraint


@st.composite
def toleration(draw: st.DrawFn) -> dict[str, Any]:
    operator = draw(st.sampled_from(["Equal", "Exists"]))
    found: dict[str, Any] = {"operator": operator}
    if operator == "Equal" or draw(st.booleans()):
        found["key"] = draw(st.sampled_from(TAINT_KEYS))
    if operator == "Equal":
        found["value"] = draw(st.sampled_from(LABEL_VALUES))
    if draw(st.booleans()):
        found["effect"] = draw(st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]))
    return found


@st.composite
def volume(draw: st.DrawFn, index: int) -> dict[str, Any]:
    name = f"v{index}"
    kind = draw(st.sampled_from(["pvc", "emptyDir", "hostPath", "ephemeral", "csi"]))
    if kind == "pvc":
        return {"name": name, "persistentVolumeClaim": {"claimName": draw(st.sampled_from(["c0", "c1", "missing"]))}}
    if kind == "emptyDir":
        return {"name": name, "emptyDir": {}}
    if kind == "hostPath":
        return {"name": name, "hostPath": {"path": "/data"}}
    if kind == "csi":
        return {"name": name, "csi": {"driver": "x.csi.io"}}
    template = {"spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "wait"}}
    return {"name": name, "ephemeral": {"volumeClaimTemplate": template}}


# -- pods ----------------------------------------------------------------------------------------------------
@st.composite
def pod_spec(draw: st.DrawFn, *, scheduler: str | None = None) -> dict[str, Any]:
    """Every field a plugin reads, each present now and then."""
    containers = [draw(container(f"c{i}")) for i in range(draw(st.integers(1, 2)))]
    spec: dict[str, Any] = {
        "containers": containers,
        "schedulerName": scheduler or draw(st.sampled_from(SCHEDULERS)),
        "priority": draw(st.sampled_from([0, 0, 10, 1000, -5])),
    }
    if draw(st.integers(0, 2)) == 0:
        spec["initContainers"] = [
            draw(container(f"i{i}", sidecar=draw(st.booleans()))) for i in range(draw(st.integers(1, 2)))
        ]
    optional: dict[str, Any] = {
        "overhead": st.fixed_dictionaries({"cpu": cpu, "memory": memory}),
        "resources": st.fixed_dictionaries({"requests": st.fixed_dictionaries({"cpu": cpu, "memory": memory})}),
        "nodeSelector": st.dictionaries(
            st.sampled_from(NODE_LABEL_KEYS[:2]), st.sampled_from(LABEL_VALUES), max_size=2
        ),
        "affinity": affinity(),
        "topologySpreadConstraints": st.lists(spread_constraint(), min_size=1, max_size=2),
        "tolerations": st.lists(toleration(), min_size=1, max_size=3),
        "schedulingGates": st.lists(st.sampled_from(GATES), min_size=1, max_size=2, unique=True).map(
            lambda names: [{"name": n} for n in names]
        ),
        "preemptionPolicy": st.just("Never"),
        "volumes": st.integers(1, 2).flatmap(lambda n: st.tuples(*(volume(i) for i in range(n))).map(list)),
        "resourceClaims": st.just([{"name": "rc", "resourceClaimName": "claim-missing"}]),
    }
    for field, strategy in optional.items():
        if draw(st.integers(0, 6)) == 0:
            value = draw(strategy)
            if value:
                spec[field] = value
    if "resources" in spec:  # pod-level limits the API requires ≥ the containers'
        spec["resources"]["limits"] = dict(spec["resources"]["requests"])
        _drop_container_limits(spec)
    return spec


def _drop_container_limits(spec: dict[str, Any]) -> None:
    for each in (*spec["containers"], *spec.get("initContainers", ())):
        for field in ("limits",):
            each.get("resources", {}).pop(field, None)
        requests = each.get("resources", {}).get("requests", {})
        for name in (GPU, HUGEPAGES):  # an extended resource needs its limit; keep the pod simple
            requests.pop(name, None)


@st.composite
def pending_pod(draw: st.DrawFn, *, scheduler: str | None = None) -> dict[str, Any]:
    """An unassigned pod; now and then with a nominated node or terminating."""
    name = fresh_name()
    status: dict[str, Any] = {"phase": "Pending"}
    if draw(st.integers(0, 6)) == 0:
        status["nominatedNodeName"] = draw(st.sampled_from(NODE_NAMES))
    meta: dict[str, Any] = {
        "name": name,
        "namespace": draw(st.sampled_from(NAMESPACES)),
        "uid": f"uid-{name}",
        "labels": draw(pod_labels),
    }
    if draw(st.integers(0, 12)) == 0:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": draw(pod_spec(scheduler=scheduler)),
        "status": status,
    }


@st.composite
def bound_pod(draw: st.DrawFn) -> dict[str, Any]:
    """A pod some other scheduler (or the user, through spec.nodeName) placed: it may over-commit its node."""
    pod = draw(pending_pod())
    pod["spec"]["nodeName"] = draw(st.sampled_from((*NODE_NAMES, "gone")))
    pod["spec"].pop("schedulingGates", None)  # the API refuses gates on a pod with a node
    pod["status"] = {"phase": draw(st.sampled_from(["Running", "Running", "Pending", "Succeeded"]))}
    return pod


# -- nodes ---------------------------------------------------------------------------------------------------
@st.composite
def node(draw: st.DrawFn, name: str | None = None) -> dict[str, Any]:
    name = name or draw(st.sampled_from(NODE_NAMES))
    labels = {HOSTNAME: name}
    labels.update(draw(st.dictionaries(st.sampled_from(NODE_LABEL_KEYS[:2]), st.sampled_from(LABEL_VALUES))))
    if draw(st.booleans()):
        labels["rank"] = str(draw(st.integers(0, 4)))
    if draw(st.integers(0, 3)) > 0:
        labels[ZONE] = draw(st.sampled_from(["z1", "z2"]))
        labels[REGION] = "r1"
    allocatable: dict[str, Any] = {
        "cpu": draw(st.sampled_from(["16", "4", "2", "1", "500m", "0"])),
        "memory": draw(st.sampled_from(["32Gi", "4Gi", "1Gi", "512Mi", "0"])),
        "pods": draw(st.sampled_from([110, 3, 1, 0])),
        "ephemeral-storage": draw(st.sampled_from(["100Gi", "20Gi", "0"])),
    }
    if draw(st.booleans()):
        allocatable[GPU] = draw(st.sampled_from([4, 1, 0]))
    if draw(st.booleans()):
        allocatable[HUGEPAGES] = draw(st.sampled_from(["0", "4Mi", "1Gi"]))
    taints = []
    if draw(st.integers(0, 3)) == 0:  # most nodes are untainted, so that most pods find somewhere to go
        taint = st.fixed_dictionaries(
            {
                "key": st.sampled_from(TAINT_KEYS),
                "value": st.sampled_from(LABEL_VALUES),
                "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
            }
        )
        taints = draw(st.lists(taint, min_size=1, max_size=2, unique_by=lambda t: (t["key"], t["effect"])))
    images = [
        {"names": [image], "sizeBytes": draw(st.sampled_from([10_000_000, 500_000_000]))}
        for image in draw(st.lists(st.sampled_from(IMAGES), max_size=2, unique=True))
    ]
    status: dict[str, Any] = {"allocatable": allocatable, "capacity": dict(allocatable), "images": images}
    features = draw(st.lists(st.sampled_from(FEATURES), max_size=2, unique=True))
    if features:
        status["declaredFeatures"] = sorted(features)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints, "unschedulable": draw(st.integers(0, 9)) == 0},
        "status": status,
    }


# -- the other objects plugins read ----------------------------------------------------------------------------
def _pvc(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": spec, "status": {}}


#: (kind, object) the cluster may hold: storage for VolumeBinding/VolumeZone/NodeVolumeLimits/VolumeRestrictions,
#: a Service and a PDB (PodTopologySpread's default constraints, preemption), namespace labels (affinity terms).
OBJECTS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "StorageClass",
        {"metadata": {"name": "wait"}, "provisioner": "x.csi.io", "volumeBindingMode": "WaitForFirstConsumer"},
    ),
    ("StorageClass", {"metadata": {"name": "now"}, "provisioner": "x.csi.io", "volumeBindingMode": "Immediate"}),
    ("PersistentVolumeClaim", _pvc("c0", accessModes=["ReadWriteOnce"], volumeName="pv0", storageClassName="now")),
    ("PersistentVolumeClaim", _pvc("c1", accessModes=["ReadWriteOnce"], storageClassName="wait")),
    (
        "PersistentVolume",
        {
            "metadata": {"name": "pv0", "labels": {ZONE: "z1"}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "now",
                "claimRef": {"namespace": "default", "name": "c0", "uid": "uid-c0"},
                "csi": {"driver": "x.csi.io", "volumeHandle": "h0"},
            },
            "status": {"phase": "Bound"},
        },
    ),
    (
        "PersistentVolume",
        {
            "metadata": {"name": "pv1"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "wait",
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]}]}]
                    }
                },
                "csi": {"driver": "x.csi.io", "volumeHandle": "h1"},
            },
            "status": {"phase": "Available"},
        },
    ),
    (
        "CSINode",
        {
            "metadata": {"name": "n0"},
            "spec": {"drivers": [{"name": "x.csi.io", "nodeID": "n0", "allocatable": {"count": 1}}]},
        },
    ),
    ("Service", {"metadata": {"name": "s", "namespace": "default"}, "spec": {"selector": {"app": "a"}}}),
    (
        "PodDisruptionBudget",
        {
            "metadata": {"name": "pdb", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "a"}}, "maxUnavailable": 0},
            "status": {"disruptionsAllowed": 0},
        },
    ),
    ("Namespace", {"metadata": {"name": "other", "labels": {"team": "x"}}}),
)
