"""A seeded generator of small clusters and pending pods that exercise every plugin we implement.

Why generated rather than hand-written: the point of the conformance suite is to find the cases nobody
thought of. Each scenario is a function of its seed alone (``random.Random(seed)``), so a disagreement found
by ``make conformance`` is reproduced by running that seed again, and the quick subset in ``make test`` is a
fixed pair of seeds.

A scenario is what the runner loads into the API server, in this order:

- two namespaces (``c<seed>-a`` with the workloads, ``c<seed>-b`` for cross-namespace affinity), labelled so
  ``namespaceSelector`` terms have something to select;
- fewer than 100 nodes (upstream then evaluates every node, so sampling cannot make the two schedulers look
  at different nodes): allocatable cpu/memory/pods/ephemeral-storage, sometimes ``example.com/gpu`` and
  hugepages; hostname/zone/region labels (some nodes lack a zone, which PodTopologySpread reports
  separately); a few other labels for selectors and ``Gt``/``Lt``; taints of all three effects;
  ``status.images`` with sizes; some nodes cordoned;
- existing pods created with ``spec.nodeName`` or created unassigned and bound with a Binding: requests
  (some with pod-level requests, a sidecar or overhead), host ports, labels, required and preferred
  (anti-)affinity, spread
  constraints; never more than the node's allocatable, so the cluster is one a scheduler could have built;
  a few are then deleted but held by a finalizer (terminating: they still use resources but no longer
  count for spreading) or marked Succeeded (invisible to both schedulers);
- Services and ReplicaSets (0 replicas) selecting some of those labels, which gives pods without their own
  constraints PodTopologySpread's system default constraints;
- the pending pods, each drawing a few features from a menu (requests with init and sidecar containers,
  pod overhead through a RuntimeClass, pod-level resources, extended resources and hugepages, image
  volumes, nodeSelector, required and preferred node affinity, tolerations, host ports, hard and soft
  spread constraints with minDomains, inclusion policies and matchLabelKeys, pod (anti-)affinity with
  namespaceSelector, namespaces and match/mismatchLabelKeys, priority classes, images), and now and then
  repeated as is (replicas). Each pending pod records which plugins its spec exercises
  (:attr:`PendingPod.features`);
- in some seeds, storage (tests/conformance/volumes.py) and a preemption layer (low-priority fillers on
  full nodes, PodDisruptionBudgets, high-priority and ``preemptionPolicy: Never`` preemptors:
  tests/conformance/preemptions.py), each drawn from its own random source.

Everything is a plain manifest dict; ``schedulerName`` is left out and set by the runner per copy.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.conformance.coverage import add_coverage
from tests.conformance.devices import add_devices
from tests.conformance.preemptions import PREEMPTION, add_preemption
from tests.conformance.volumes import VOLUME_PLUGINS, add_storage

#: Cluster-wide objects every scenario may refer to (created once per run by the runner).
PRIORITY_CLASSES = {"conformance-high": 1000, "conformance-low": -100}
RUNTIME_CLASS = "conformance-overhead"
RUNTIME_CLASS_OVERHEAD = {"cpu": "250m", "memory": "64Mi"}

ZONE_KEY = "topology.kubernetes.io/zone"
REGION_KEY = "topology.kubernetes.io/region"
HOSTNAME_KEY = "kubernetes.io/hostname"
GPU = "example.com/gpu"
HUGEPAGES = "hugepages-2Mi"
#: Annotations that tell the runner how to finish an existing pod after creating it.
LIFECYCLE_ANNOTATION = "conformance.kopf-scheduler.io/lifecycle"
TERMINATING, SUCCEEDED = "terminating", "succeeded"
#: An existing pod with this annotation is created without a node and then bound through a Binding.
BIND_ANNOTATION = "conformance.kopf-scheduler.io/bind-with"
#: The schedulerName of such a pod before its binding: no scheduler serves it.
NOBODY = "conformance-nobody"
#: The finalizer that keeps a "terminating" existing pod around (removed at cleanup).
HOLD_FINALIZER = "conformance.kopf-scheduler.io/hold"

#: (name as pods write it, names a node reports, size in bytes). Pods sometimes omit ``:latest``, which
#: ImageLocality normalises; the pause image is below the 23 MiB threshold on purpose.
IMAGES: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("registry.k8s.io/pause:3.10", ("registry.k8s.io/pause:3.10",), 320_000),
    ("docker.io/library/nginx:1.27", ("docker.io/library/nginx:1.27",), 72 * 2**20),
    ("docker.io/library/postgres:17", ("docker.io/library/postgres:17",), 450 * 2**20),
    ("quay.io/prometheus/prometheus:v3.0.0", ("quay.io/prometheus/prometheus:v3.0.0",), 300 * 2**20),
    ("ghcr.io/example/ml-trainer:2.1", ("ghcr.io/example/ml-trainer:2.1",), 1800 * 2**20),
    ("example.com/app/web", ("example.com/app/web:latest", "example.com/app/web@sha256:" + "ab" * 32), 120 * 2**20),
    ("localhost:5000/tools/debug", ("localhost:5000/tools/debug:latest",), 60 * 2**20),
)

APPS = ("web", "db", "cache", "batch", "api")
TIERS = ("frontend", "backend")
VERSIONS = ("v1", "v2")
TAINT_KEYS = ("dedicated", "gpu", "maintenance", "spot")
TAINT_VALUES = ("infra", "ml", "true", "")
EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")
DISKS = ("ssd", "hdd")

#: The plugins a pending pod can exercise (queue sort and the binder are not compared; NodeName is never
#: decisive: tests/conformance/coverage.py says why).
PLUGINS = (
    "SchedulingGates",
    "NodeName",
    "NodeUnschedulable",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "PodTopologySpread",
    "InterPodAffinity",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
    *VOLUME_PLUGINS,
    "DynamicResources",
    "NodeDeclaredFeatures",
    PREEMPTION,
)


@dataclass
class PendingPod:
    """One pod to schedule: its manifest (no schedulerName) and the plugins its spec exercises."""

    index: int
    manifest: dict[str, Any]
    features: tuple[str, ...]

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.manifest["metadata"]["namespace"])


@dataclass
class Scenario:
    seed: int
    size: str
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    existing_pods: list[dict[str, Any]] = field(default_factory=list)
    services: list[dict[str, Any]] = field(default_factory=list)
    replica_sets: list[dict[str, Any]] = field(default_factory=list)
    pending: list[PendingPod] = field(default_factory=list)
    #: Storage (tests.conformance.volumes), created before the existing pods; empty in most scenarios.
    storage_classes: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    csinodes: list[dict[str, Any]] = field(default_factory=list)
    csi_drivers: list[dict[str, Any]] = field(default_factory=list)
    capacities: list[dict[str, Any]] = field(default_factory=list)
    #: PodDisruptionBudgets with the status the runner writes (tests.conformance.preemptions).
    budgets: list[dict[str, Any]] = field(default_factory=list)
    #: Devices (tests.conformance.devices): DeviceClasses, ResourceSlices, and the pending pods' ResourceClaims.
    device_classes: list[dict[str, Any]] = field(default_factory=list)
    resource_slices: list[dict[str, Any]] = field(default_factory=list)
    resource_claims: list[dict[str, Any]] = field(default_factory=list)

    @property
    def node_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.nodes]

    @property
    def namespace_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.namespaces]


#: Sizes: (min nodes, max nodes, min pending pods, max pending pods). All below 100 nodes.
SIZES: dict[str, tuple[int, int, int, int]] = {
    "small": (3, 6, 8, 12),
    "normal": (4, 14, 10, 18),
    "large": (10, 40, 15, 30),
    "xl": (60, 99, 20, 30),
}


def _cpu(rng: random.Random, choices: Sequence[int]) -> str:
    milli = rng.choice(choices)
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli}m"


def _mem(rng: random.Random, choices: Sequence[int]) -> str:
    mi = rng.choice(choices)
    return f"{mi // 1024}Gi" if mi % 1024 == 0 else f"{mi}Mi"


def _normalized(image: str) -> str:
    return image + ":latest" if image.rfind(":") <= image.rfind("/") else image


def _milli(container: dict[str, Any], resource: str) -> int:
    text = str(((container.get("resources") or {}).get("requests") or {}).get(resource, "0"))
    return int(text[:-1]) if text.endswith("m") else int(text) * 1000


def _mebi(container: dict[str, Any], resource: str) -> int:
    text = str(((container.get("resources") or {}).get("requests") or {}).get(resource, "0Mi"))
    return int(text[:-2]) * (1024 if text.endswith("Gi") else 1)


def _drop_duplicate_host_ports(containers: Sequence[dict[str, Any]]) -> None:
    """The API refuses a pod that asks twice for the same host port, protocol and IP."""
    seen: set[tuple[int, str, str]] = set()
    for container in containers:
        kept = []
        for port in container.get("ports") or ():
            key = (port["hostPort"], port.get("protocol", "TCP"), port.get("hostIP", ""))
            if key not in seen:
                seen.add(key)
                kept.append(port)
        if kept:
            container["ports"] = kept
        else:
            container.pop("ports", None)


class _Builder:
    """Holds the random source and the scenario under construction."""

    def __init__(self, seed: int, size: str) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.size = size
        self.scenario = Scenario(seed=seed, size=size)
        self.ns_a = f"c{seed}-a"
        self.ns_b = f"c{seed}-b"
        self.zones: list[str] = []
        self.taints: list[dict[str, str]] = []
        #: Remaining allocatable per node, to keep existing pods within capacity.
        self.free: dict[str, dict[str, float]] = {}

    # -- cluster -------------------------------------------------------------------------------------
    def namespaces(self) -> None:
        teams = ["a", "b"]
        self.rng.shuffle(teams)
        for name, team in ((self.ns_a, teams[0]), (self.ns_b, teams[1])):
            self.scenario.namespaces.append(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": name,
                        "labels": {"conformance/team": team, "conformance/seed": str(self.seed)},
                    },
                }
            )

    def nodes(self) -> None:
        rng = self.rng
        low, high, _, _ = SIZES[self.size]
        count = rng.randint(low, high)
        n_zones = rng.choice([1, 2, 2, 3, 3, 4])
        self.zones = [f"zone-{chr(ord('a') + i)}" for i in range(n_zones)]
        regions = ["region-1", "region-2"] if n_zones > 2 and rng.random() < 0.5 else ["region-1"]
        with_gpu = rng.random() < 0.5
        for i in range(count):
            name = f"c{self.seed}-n{i:02d}"
            cpu_milli = rng.choice([2000, 4000, 4000, 8000, 3500, 16000])
            mem_mi = rng.choice([4096, 8192, 8192, 16384, 32768])
            pods = rng.choice([110] * 8 + [3, 5])
            alloc: dict[str, str] = {
                "cpu": f"{cpu_milli // 1000}" if cpu_milli % 1000 == 0 else f"{cpu_milli}m",
                "memory": f"{mem_mi}Mi",
                "pods": str(pods),
                "ephemeral-storage": rng.choice(["20Gi", "100Gi"]),
            }
            if with_gpu and rng.random() < 0.4:
                alloc[GPU] = str(rng.choice([1, 2, 4]))
            if rng.random() < 0.15:
                alloc[HUGEPAGES] = rng.choice(["512Mi", "1Gi"])
            labels = {HOSTNAME_KEY: name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
            if rng.random() < 0.9:  # a few nodes have no zone: spread reports "(missing required label)"
                zone = self.zones[i % n_zones] if rng.random() < 0.7 else rng.choice(self.zones)
                labels[ZONE_KEY] = zone
                labels[REGION_KEY] = regions[self.zones.index(zone) % len(regions)]
            if rng.random() < 0.7:
                labels["disk"] = rng.choice(DISKS)
            labels["rank"] = str(rng.randint(1, 20))
            if rng.random() < 0.3:
                labels["pool"] = rng.choice(["general", "batch"])
            taints = []
            if rng.random() < 0.3:
                key = rng.choice(TAINT_KEYS)
                taint = {"key": key, "effect": rng.choice(EFFECTS)}
                value = rng.choice(TAINT_VALUES)
                if value:
                    taint["value"] = value
                taints.append(taint)
                if rng.random() < 0.2:
                    other = rng.choice([k for k in TAINT_KEYS if k != key])
                    taints.append({"key": other, "effect": rng.choice(EFFECTS)})
                self.taints.extend(taints)
            unschedulable = rng.random() < 0.1
            images = []
            for _pod_name, node_names, size in IMAGES:
                if rng.random() < 0.35:
                    images.append({"names": list(node_names), "sizeBytes": size})
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"unschedulable": unschedulable} if unschedulable else {},
                "status": {"capacity": dict(alloc), "allocatable": dict(alloc), "images": images},
            }
            if taints:
                node["spec"]["taints"] = taints
            self.scenario.nodes.append(node)
            self.free[name] = {"cpu": cpu_milli, "memory": mem_mi, "pods": pods, GPU: int(alloc.get(GPU, 0))}

    def workloads(self) -> None:
        rng = self.rng
        for app in rng.sample(APPS, k=rng.randint(1, 3)):
            self.scenario.services.append(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": f"svc-{app}", "namespace": self.ns_a},
                    "spec": {"selector": {"app": app}, "ports": [{"port": 80}]},
                }
            )
        if rng.random() < 0.5:
            app = rng.choice(APPS)
            self.scenario.replica_sets.append(
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "metadata": {"name": f"rs-{app}", "namespace": self.ns_a},
                    "spec": {
                        "replicas": 0,
                        "selector": {"matchLabels": {"app": app}},
                        "template": {
                            "metadata": {"labels": {"app": app}},
                            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
                        },
                    },
                }
            )

    def existing_pods(self) -> None:
        rng = self.rng
        index = 0
        for node in self.scenario.nodes:
            name = node["metadata"]["name"]
            for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
                free = self.free[name]
                if free["pods"] < 1:
                    break
                cpu = rng.choice([100, 250, 500, 1000])
                mem = rng.choice([128, 256, 512, 1024, 2048])
                # How the node accounts for it besides the container: pod-level requests, a sidecar, overhead.
                shape = rng.choices(["plain", "pod-level", "sidecar", "overhead"], weights=[73, 10, 10, 7])[0]
                extra_cpu, extra_mem = {"pod-level": (100, 128), "sidecar": (100, 64), "overhead": (250, 64)}.get(
                    shape, (0, 0)
                )
                if cpu + extra_cpu > free["cpu"] or mem + extra_mem > free["memory"]:
                    continue
                free["cpu"] -= cpu + extra_cpu
                free["memory"] -= mem + extra_mem
                free["pods"] -= 1
                namespace = self.ns_a if rng.random() < 0.8 else self.ns_b
                labels = self.labels()
                container: dict[str, Any] = {
                    "name": "c",
                    "image": rng.choice(IMAGES)[0],
                    "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}},
                }
                if rng.random() < 0.2:
                    container["ports"] = [self.host_port()]
                spec: dict[str, Any] = {"nodeName": name, "containers": [container], "terminationGracePeriodSeconds": 0}
                if shape == "pod-level":
                    spec["resources"] = {"requests": {"cpu": f"{cpu + 100}m", "memory": f"{mem + 128}Mi"}}
                elif shape == "sidecar":
                    spec["initContainers"] = [
                        {
                            "name": "side",
                            "image": "registry.k8s.io/pause:3.10",
                            "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ]
                elif shape == "overhead":
                    spec["runtimeClassName"] = RUNTIME_CLASS
                if free[GPU] and rng.random() < 0.3:
                    container["resources"]["requests"][GPU] = "1"
                    container["resources"]["limits"] = {GPU: "1"}
                    free[GPU] -= 1
                affinity = self.existing_affinity(labels)
                if affinity:
                    spec["affinity"] = affinity
                if rng.random() < 0.15:
                    spec["topologySpreadConstraints"] = [
                        {
                            "maxSkew": 1,
                            "topologyKey": ZONE_KEY,
                            "whenUnsatisfiable": "ScheduleAnyway",
                            "labelSelector": {"matchLabels": {"app": labels["app"]}},
                        }
                    ]
                if node.get("spec", {}).get("taints"):
                    spec["tolerations"] = [{"operator": "Exists"}]
                metadata: dict[str, Any] = {"name": f"e{index:02d}", "namespace": namespace, "labels": labels}
                if rng.random() < 0.3:
                    # Created unassigned, then bound with a Binding, as a scheduler would leave it.
                    metadata["annotations"] = {BIND_ANNOTATION: "Binding"}
                roll = rng.random()
                if roll < 0.06:
                    # Deleted but held by a finalizer: still on the node for resources, not for spreading.
                    metadata.setdefault("annotations", {})[LIFECYCLE_ANNOTATION] = TERMINATING
                    metadata["finalizers"] = [HOLD_FINALIZER]
                elif roll < 0.12:
                    # Finished: invisible to both schedulers, whatever it requested.
                    metadata.setdefault("annotations", {})[LIFECYCLE_ANNOTATION] = SUCCEEDED
                self.scenario.existing_pods.append(
                    {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
                )
                index += 1

    def existing_affinity(self, labels: dict[str, str]) -> dict[str, Any]:
        """Existing pods' terms matter to incoming pods: required anti-affinity filters, the rest scores."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.12:
            other = rng.choice(APPS)
            return {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": other}},
                            "topologyKey": rng.choice([HOSTNAME_KEY, HOSTNAME_KEY, ZONE_KEY]),
                        }
                    ]
                }
            }
        if roll < 0.24:
            kind = rng.choice(["podAffinity", "podAntiAffinity"])
            return {
                kind: {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": rng.randint(1, 100),
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"tier": rng.choice(TIERS)}},
                                "topologyKey": rng.choice([HOSTNAME_KEY, ZONE_KEY]),
                            },
                        }
                    ]
                }
            }
        if roll < 0.30:
            # Required affinity of an existing pod scores for incoming pods it matches (hardPodAffinityWeight).
            return {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": labels["app"]}}, "topologyKey": ZONE_KEY}
                    ]
                }
            }
        return {}

    # -- pods ----------------------------------------------------------------------------------------
    def labels(self) -> dict[str, str]:
        rng = self.rng
        labels = {"app": rng.choice(APPS), "tier": rng.choice(TIERS)}
        if rng.random() < 0.5:
            labels["version"] = rng.choice(VERSIONS)
        return labels

    def host_port(self) -> dict[str, Any]:
        rng = self.rng
        port: dict[str, Any] = {"containerPort": 8080, "hostPort": rng.choice([80, 443, 8080])}
        if rng.random() < 0.3:
            port["protocol"] = "UDP"
        if rng.random() < 0.2:
            port["hostIP"] = rng.choice(["127.0.0.1", "10.0.0.1"])
        return port

    def pending_pods(self) -> None:
        rng = self.rng
        _, _, low, high = SIZES[self.size]
        count = rng.randint(low, high)
        pending = self.scenario.pending
        while len(pending) < count:
            if pending and rng.random() < 0.25:
                # Replicas: the same pod again (a Deployment's pods differ only in name). Identical consecutive
                # pods are what upstream's opportunistic batching reuses the previous cycle's ranking for.
                previous = pending[-1]
                manifest = copy.deepcopy(previous.manifest)
                manifest["metadata"]["name"] = f"p{len(pending):02d}"
                pending.append(PendingPod(index=len(pending), manifest=manifest, features=previous.features))
            else:
                pending.append(self.pending_pod(len(pending)))

    def pending_pod(self, index: int) -> PendingPod:
        rng = self.rng
        features: set[str] = {"NodeResourcesFit"}
        namespace = self.ns_a if rng.random() < 0.85 else self.ns_b
        labels = self.labels()
        spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0}
        image = rng.choice(IMAGES)[0]
        main: dict[str, Any] = {"name": "main", "image": image}
        containers = [main]
        requests = self.requests()
        if requests:
            main["resources"] = {"requests": requests}
        if rng.random() < 0.25:
            extra: dict[str, Any] = {"name": "helper", "image": rng.choice(IMAGES)[0]}
            more = self.requests()
            if more:
                extra["resources"] = {"requests": more}
            containers.append(extra)
        spec["containers"] = containers
        if rng.random() < 0.3:
            spec["initContainers"] = self.init_containers()
        if rng.random() < 0.1:
            spec["runtimeClassName"] = RUNTIME_CLASS
        if rng.random() < 0.08:
            # Pod-level requests must cover the containers' sum (API validation).
            everything = [*containers, *spec.get("initContainers", ())]  # an upper bound of the aggregate
            cpu = max(rng.choice([2000, 3000]), sum(_milli(c, "cpu") for c in everything))
            mem = max(rng.choice([4096, 6144]), sum(_mebi(c, "memory") for c in everything))
            spec["resources"] = {"requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}}
        if rng.random() < 0.2:
            amount = str(rng.choice([1, 1, 2, 3]))
            main.setdefault("resources", {}).setdefault("requests", {})[GPU] = amount
            main["resources"]["limits"] = {GPU: amount}
        if rng.random() < 0.06:
            # Hugepages need requests == limits and a memory request next to them.
            amount = rng.choice(["256Mi", "768Mi"])
            resources = main.setdefault("resources", {})
            resources.setdefault("requests", {}).setdefault("memory", "256Mi")
            resources["requests"][HUGEPAGES] = amount
            resources.setdefault("limits", {}).update({HUGEPAGES: amount, "memory": resources["requests"]["memory"]})
        if (
            any(
                "cpu" in (c.get("resources") or {}).get("requests", {})
                or "memory" in (c.get("resources") or {}).get("requests", {})
                for c in (*containers, *spec.get("initContainers", ()))
            )
            or spec.get("resources")
            or spec.get("runtimeClassName")
        ):
            features.add("NodeResourcesBalancedAllocation")
        if rng.random() < 0.05:
            spec["volumes"] = [{"name": "tools", "image": {"reference": rng.choice(IMAGES)[0]}}]
        if rng.random() < 0.3:
            spec["priorityClassName"] = rng.choice(sorted(PRIORITY_CLASSES))
        if rng.random() < 0.25:
            main["ports"] = [self.host_port()]
        _drop_duplicate_host_ports([*spec.get("initContainers", ()), *containers])
        if any(c.get("ports") for c in containers) or any(
            c.get("ports") and c.get("restartPolicy") == "Always" for c in spec.get("initContainers", ())
        ):
            features.add("NodePorts")
        if rng.random() < 0.2:
            spec["nodeSelector"] = self.node_selector()
            features.add("NodeAffinity")
        affinity: dict[str, Any] = {}
        if rng.random() < 0.35:
            affinity["nodeAffinity"] = self.node_affinity()
            features.add("NodeAffinity")
        if rng.random() < 0.4:
            spec["tolerations"] = self.tolerations()
            features.add("TaintToleration")
        if rng.random() < 0.4:
            spec["topologySpreadConstraints"] = self.spread_constraints(labels)
            features.add("PodTopologySpread")
        if rng.random() < 0.45:
            affinity.update(self.pod_affinity(labels))
            if affinity.get("podAffinity") or affinity.get("podAntiAffinity"):
                features.add("InterPodAffinity")
        if affinity:
            spec["affinity"] = affinity
        if self.images_on_nodes(spec):
            features.add("ImageLocality")
        if "topologySpreadConstraints" not in spec and self.selected_by_workload(namespace, labels):
            features.add("PodTopologySpread")  # the system default constraints apply
        manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{index:02d}", "namespace": namespace, "labels": labels},
            "spec": spec,
        }
        return PendingPod(index=index, manifest=manifest, features=tuple(sorted(features)))

    def images_on_nodes(self, spec: dict[str, Any]) -> bool:
        """Whether a node holds one of the pod's images (big enough to score), as ImageLocality names them."""
        wanted = {_normalized(c["image"]) for c in (*spec.get("initContainers", ()), *spec["containers"])}
        wanted |= {_normalized(v["image"]["reference"]) for v in spec.get("volumes", ()) if "image" in v}
        for node in self.scenario.nodes:
            for image in node["status"]["images"]:
                if image["sizeBytes"] >= 23 * 2**20 and wanted & set(image["names"]):
                    return True
        return False

    def selected_by_workload(self, namespace: str, labels: dict[str, str]) -> bool:
        for svc in self.scenario.services:
            if svc["metadata"]["namespace"] == namespace and svc["spec"]["selector"].items() <= labels.items():
                return True
        for rs in self.scenario.replica_sets:
            selector = rs["spec"]["selector"]["matchLabels"]
            if rs["metadata"]["namespace"] == namespace and selector.items() <= labels.items():
                return True
        return False

    def requests(self) -> dict[str, str]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.12:
            return {}  # best effort: the non-zero defaults only count for scoring
        out: dict[str, str] = {"cpu": _cpu(rng, [100, 250, 500, 1000, 1500, 2000, 3000])}
        if rng.random() < 0.85:
            out["memory"] = _mem(rng, [128, 256, 512, 1024, 2048, 4096, 6144])
        if rng.random() < 0.1:
            out["ephemeral-storage"] = rng.choice(["1Gi", "30Gi"])
        return out

    def init_containers(self) -> list[dict[str, Any]]:
        rng = self.rng
        out = []
        for i in range(rng.randint(1, 2)):
            container: dict[str, Any] = {
                "name": f"init{i}",
                "image": rng.choice(IMAGES)[0],
                "resources": {"requests": {"cpu": _cpu(rng, [500, 2000, 4000]), "memory": _mem(rng, [256, 3072])}},
            }
            if rng.random() < 0.5:
                container["restartPolicy"] = "Always"  # a sidecar: its requests stay for the pod's life
                if rng.random() < 0.3:
                    container["ports"] = [self.host_port()]
            out.append(container)
        return out

    def node_selector(self) -> dict[str, str]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.4 and self.zones:
            return {ZONE_KEY: rng.choice(self.zones)}
        if roll < 0.8:
            return {"disk": rng.choice(DISKS)}
        return {"pool": rng.choice(["general", "batch", "gpu"])}

    def node_affinity(self) -> dict[str, Any]:
        rng = self.rng
        out: dict[str, Any] = {}
        if rng.random() < 0.7:
            terms = [{"matchExpressions": [self.node_requirement()]} for _ in range(rng.choice([1, 1, 2]))]
            if rng.random() < 0.3:
                terms[0]["matchExpressions"].append(self.node_requirement())
            if rng.random() < 0.12:
                names = self.scenario.node_names
                target = rng.choice([*names, f"c{self.seed}-missing"])
                terms[-1]["matchFields"] = [
                    {"key": "metadata.name", "operator": rng.choice(["In", "In", "NotIn"]), "values": [target]}
                ]
            out["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
        if not out or rng.random() < 0.6:
            out["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": rng.randint(1, 100), "preference": {"matchExpressions": [self.node_requirement()]}}
                for _ in range(rng.randint(1, 3))
            ]
        return out

    def node_requirement(self) -> dict[str, Any]:
        rng = self.rng
        kind = rng.choice(["zone", "disk", "rank", "exists", "region"])
        if kind == "zone" and self.zones:
            values = rng.sample(self.zones, k=rng.randint(1, len(self.zones)))
            return {"key": ZONE_KEY, "operator": rng.choice(["In", "In", "NotIn"]), "values": values}
        if kind == "rank":
            return {"key": "rank", "operator": rng.choice(["Gt", "Lt"]), "values": [str(rng.randint(3, 18))]}
        if kind == "exists":
            return {"key": rng.choice(["disk", "pool", ZONE_KEY]), "operator": rng.choice(["Exists", "DoesNotExist"])}
        if kind == "region":
            return {"key": REGION_KEY, "operator": "In", "values": ["region-1"]}
        return {"key": "disk", "operator": rng.choice(["In", "NotIn"]), "values": [rng.choice(DISKS)]}

    def tolerations(self) -> list[dict[str, Any]]:
        rng = self.rng
        out: list[dict[str, Any]] = []
        pool = self.taints or [{"key": rng.choice(TAINT_KEYS), "effect": rng.choice(EFFECTS)}]
        for _ in range(rng.randint(1, 2)):
            taint = rng.choice(pool)
            roll = rng.random()
            if roll < 0.4:
                tol: dict[str, Any] = {"key": taint["key"], "operator": "Exists"}
            elif roll < 0.75:
                tol = {"key": taint["key"], "operator": "Equal", "value": taint.get("value", "")}
            elif roll < 0.85:
                tol = {"key": taint["key"], "operator": "Equal", "value": "other"}
            else:
                tol = {"operator": "Exists"}
            if rng.random() < 0.6 and "key" in tol:
                tol["effect"] = taint["effect"] if rng.random() < 0.8 else rng.choice(EFFECTS)
                if tol["effect"] == "NoExecute" and rng.random() < 0.5:
                    tol["tolerationSeconds"] = 60
            out.append(tol)
        if rng.random() < 0.15:
            out.append({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"})
        return out

    def spread_constraints(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        rng = self.rng
        out = []
        used: set[tuple[str, str]] = set()
        for _ in range(rng.choice([1, 1, 2])):
            key = rng.choice([ZONE_KEY, ZONE_KEY, HOSTNAME_KEY, REGION_KEY])
            when = rng.choice(["DoNotSchedule", "ScheduleAnyway"])
            if (key, when) in used:
                continue
            used.add((key, when))
            match_on = rng.choice(["app", "tier"])
            constraint: dict[str, Any] = {
                "maxSkew": rng.choice([1, 1, 2, 3]),
                "topologyKey": key,
                "whenUnsatisfiable": when,
                "labelSelector": {"matchLabels": {match_on: labels[match_on]}},
            }
            if when == "DoNotSchedule" and rng.random() < 0.3:
                constraint["minDomains"] = rng.randint(1, 5)
            if rng.random() < 0.25:
                constraint["nodeAffinityPolicy"] = rng.choice(["Honor", "Ignore"])
            if rng.random() < 0.25:
                constraint["nodeTaintsPolicy"] = rng.choice(["Honor", "Ignore"])
            if "version" in labels and rng.random() < 0.3:
                constraint["matchLabelKeys"] = ["version"]
            else:
                roll = rng.random()
                if roll < 0.05:
                    del constraint["labelSelector"]  # no selector: counts no pod at all
                elif roll < 0.1:
                    constraint["labelSelector"] = {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
            out.append(constraint)
        return out

    def pod_affinity(self, labels: dict[str, str]) -> dict[str, Any]:
        rng = self.rng
        out: dict[str, Any] = {}
        for kind in ("podAffinity", "podAntiAffinity"):
            if rng.random() < 0.5:
                continue
            block: dict[str, Any] = {}
            if rng.random() < 0.6:
                block["requiredDuringSchedulingIgnoredDuringExecution"] = [self.affinity_term(labels, kind)]
            if rng.random() < 0.6:
                block["preferredDuringSchedulingIgnoredDuringExecution"] = [
                    {"weight": rng.randint(1, 100), "podAffinityTerm": self.affinity_term(labels, kind)}
                    for _ in range(rng.randint(1, 2))
                ]
            if block:
                out[kind] = block
        return out

    def affinity_term(self, labels: dict[str, str], kind: str) -> dict[str, Any]:
        rng = self.rng
        key = rng.choice(["app", "app", "tier"])
        # Anti-affinity mostly against the pod's own kind (spreading replicas); affinity towards another app.
        value = (
            labels[key]
            if (kind == "podAntiAffinity" and rng.random() < 0.6)
            else rng.choice(APPS if key == "app" else TIERS)
        )
        selector: dict[str, Any] = {"matchLabels": {key: value}}
        if rng.random() < 0.2:
            selector = {"matchExpressions": [{"key": key, "operator": "In", "values": [value, rng.choice(APPS)]}]}
        term: dict[str, Any] = {
            "labelSelector": selector,
            "topologyKey": rng.choice([HOSTNAME_KEY, ZONE_KEY, ZONE_KEY, REGION_KEY]),
        }
        if "version" in labels and key != "version" and rng.random() < 0.15:
            # The API server folds these into the selector at creation (MatchLabelKeysInPodAffinity).
            term["matchLabelKeys" if rng.random() < 0.5 else "mismatchLabelKeys"] = ["version"]
        else:
            roll = rng.random()
            if roll < 0.04:
                term["labelSelector"] = {}  # an empty selector matches every pod
            elif roll < 0.07:
                del term["labelSelector"]  # no selector matches none
        roll = rng.random()
        if roll < 0.15:
            term["namespaceSelector"] = {}  # every namespace
        elif roll < 0.3:
            term["namespaceSelector"] = {"matchLabels": {"conformance/team": rng.choice(["a", "b"])}}
        elif roll < 0.4:
            term["namespaces"] = [self.ns_b]
        return term


def generate(seed: int, size: str = "normal", *, coverage: bool = True) -> Scenario:
    """The scenario of ``seed`` (deterministic: same seed and size, same objects). ``coverage=False``: without
    the last pass (coverage.py), as seeds were generated before it existed (older pinned regressions)."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, not {size!r}")
    builder = _Builder(seed, size)
    builder.namespaces()
    builder.nodes()
    builder.workloads()
    builder.existing_pods()
    builder.pending_pods()
    add_storage(builder.scenario, builder.ns_a, builder.zones)
    add_preemption(builder.scenario, builder.ns_a)
    add_devices(builder.scenario, seed)
    if coverage:
        add_coverage(builder.scenario, seed)
    return builder.scenario


def with_scheduler(manifest: dict[str, Any], scheduler_name: str) -> dict[str, Any]:
    """A deep copy of a pending pod's manifest addressed to ``scheduler_name``."""
    body = copy.deepcopy(manifest)
    body["spec"]["schedulerName"] = scheduler_name
    return body
