"""Seeded timelines for upstream's default profile (``spec: {}``): what the timeline harness plays against
kube-scheduler v1.36.3 run without feature gates beyond its defaults (issue 37, item 1: multi-step scenarios).

Why: the single-pod scenarios compare one decision on a fresh queue. Here pods come in bursts and wait across
steps, and cluster events between the steps wake them (or must not): upstream's queueing hints, backoff,
priority order, nominations and preemption's victims are compared as upstream behaves, step by step.

A timeline is a function of its seed alone (``random.Random(seed)``):

- step 0 creates 3-5 nodes (distinct cpu and memory, two zones), and, when the timeline has them, the
  timeline's StorageClass (WaitForFirstConsumer, no provisioner), DeviceClass and ResourceSlices of some nodes;
  in most timelines every pod prefers the nodes with a distinct weight each (preferred node affinity), so the
  scores rank the nodes apart (a tie upstream broke differently is still recognised and ends the comparison);
- then 5-8 steps, each a burst of pods or a cluster event. Pods: plain ones, identical replicas (one class,
  compared as a multiset), pods selecting a node label no node has yet, pods tolerating a taint, gated pods
  (``schedulingGates``), pods with a claim (a PVC that waits for a PV; a ResourceClaim that waits for devices),
  and in a share of the timelines pods of a low or a high priority class. Events: a node added, labelled,
  tainted or untainted, cordoned or uncordoned, deleted; pods deleted; a PV for a waiting claim; a ResourceSlice
  for a node; a PodDisruptionBudget over the low-priority pods (its ``disruptionsAllowed`` drawn, written as the
  disruption controller would); a pod's scheduling gate removed.

What a timeline must avoid: an outcome that hangs on real time rather than on events. Upstream moves a pod that
stays in its unschedulable pool longer than five minutes (podMaxInUnschedulablePodsDuration) back to the queue
whatever happened; a timeline takes well under that (about a minute), so every retry compared here is one an
event or a backoff caused. The harness waits, after each step, until both schedulers' active and backoff
queues are empty (their ``scheduler_pending_pods`` gauges) and the state has been quiet for a while.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from tests.conformance.gang_timelines import Action, Step, Timeline, create, delete, pod_manifest
from tests.conformance.generator import HOSTNAME_KEY, ZONE_KEY
from tests.conformance.timeline_objects import TIMELINE_LABEL

DISK_KEY = "conformance/disk"
TAINT_KEY = "conformance/dedicated"
GATE = "conformance.kopf-scheduler.io/hold"
DRIVER = "gpu.timeline.example.com"
TIER_KEY = "tier"
#: Draws per timeline (the rest of the timelines go without).
VOLUMES_SHARE, DEVICES_SHARE, PRIORITY_SHARE = 0.3, 0.3, 0.4


def node_manifest(name: str, cpu_m: int, mem_gi: int, zone: str, labels: dict[str, str] | None = None) -> Any:
    allocatable = {"cpu": f"{cpu_m}m", "memory": f"{mem_gi}Gi", "pods": "16"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOSTNAME_KEY: name, ZONE_KEY: zone, **(labels or {})}},
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def patch(kind: str, name: str, operations: list[dict[str, Any]]) -> Action:
    """A JSON patch (the harness's ``patch`` verb; the operations travel in the body)."""
    return Action("patch", kind, name, {"operations": operations})


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


@dataclass
class _Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    cordoned: bool = False
    slice: bool = False


class _Builder:
    """The state of one timeline while it is drawn."""

    def __init__(self, seed: int, profile: str) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.profile = profile
        self.namespace = f"tl-{seed}"
        self.steps: list[Step] = []
        self.features: set[str] = set()
        self.nodes: list[_Node] = []
        self.made = 0
        self.pods_made = 0
        self.pods: list[str] = []
        self.low: list[str] = []
        self.gated: list[str] = []
        self.waiting_claims: list[str] = []
        self.preference: dict[str, int] | None = {} if self.rng.random() < 0.75 else None
        self.volumes = self.rng.random() < VOLUMES_SHARE
        self.devices = self.rng.random() < DEVICES_SHARE
        self.priorities = self.rng.random() < PRIORITY_SHARE
        self.storage_class = f"local-{seed}"
        self.device_class = f"gpu-{seed}"
        self.pdbs = 0

    # -- objects ---------------------------------------------------------------------------------------
    def label(self) -> dict[str, str]:
        return {TIMELINE_LABEL: str(self.seed)}

    def new_node(self) -> Action:
        index = self.made
        self.made += 1
        name = f"t{self.seed}-n{index}"
        node = _Node(name)
        if self.rng.random() < 0.25:
            node.labels[DISK_KEY] = "ssd"
        self.nodes.append(node)
        if self.preference is not None:
            taken = set(self.preference.values())
            self.preference[name] = self.rng.choice([w for w in range(1, 101) if w not in taken])
        cpu, mem = self.rng.choice(range(1500, 4001, 125)), self.rng.randint(3, 12)
        return create(node_manifest(name, cpu, mem, f"zone-{index % 2}", node.labels))

    def resource_slice(self, node: _Node) -> Action:
        node.slice = True
        devices = [{"name": f"gpu-{i}", "attributes": {"memory": {"int": self.rng.choice((16, 40, 80))}}}
                   for i in range(self.rng.randint(1, 2))]  # fmt: skip
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node.name}-gpus", "labels": self.label()},
            "spec": {
                "driver": DRIVER,
                "nodeName": node.name,
                "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
        return create(body)

    def persistent_volume(self, claim: str, node: str) -> Action:
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"t{self.seed}-pv-{claim}", "labels": self.label()},
            "spec": {
                "capacity": {"storage": "5Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": self.storage_class,
                "local": {"path": f"/mnt/{claim}"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": HOSTNAME_KEY, "operator": "In", "values": [node]}]}
                        ]
                    }
                },
            },
            "status": {"phase": "Available"},
        }
        return create(body)

    def classes(self) -> list[Action]:
        actions = []
        if self.volumes:
            actions.append(
                create(
                    {
                        "apiVersion": "storage.k8s.io/v1",
                        "kind": "StorageClass",
                        "metadata": {"name": self.storage_class, "labels": self.label()},
                        "provisioner": "kubernetes.io/no-provisioner",
                        "volumeBindingMode": "WaitForFirstConsumer",
                    }
                )
            )
        if self.devices:
            expression = f'device.driver == "{DRIVER}"'
            actions.append(
                create(
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "DeviceClass",
                        "metadata": {"name": self.device_class, "labels": self.label()},
                        "spec": {"selectors": [{"cel": {"expression": expression}}]},
                    }
                )
            )
        return actions

    # -- pods ------------------------------------------------------------------------------------------
    def pod(self, name: str, klass: str, cpu: int, mem: int, priority: str | None) -> dict[str, Any]:
        body: dict[str, Any] = pod_manifest(
            name, self.namespace, self.profile, cpu, mem, klass=klass, priority_class=priority,
            preference=self.preference,
        )  # fmt: skip
        if priority == "gang-low":
            body["metadata"]["labels"] = {TIER_KEY: "low"}
        return body

    def request(self) -> tuple[int, int]:
        return self.rng.choice((250, 500, 750, 1000, 1500, 2000, 2500)), self.rng.choice((256, 512, 1024, 2048))

    def priority(self) -> str | None:
        if not self.priorities:
            return None
        choice = self.rng.choice((None, "gang-low", "gang-low", "gang-high"))
        if choice is not None:
            self.features.add("priority")
        return choice

    def burst(self) -> None:
        kinds = ["plain", "plain", "plain", "replicas", "selector", "toleration", "gated"]
        kinds += ["volume"] if self.volumes else []
        kinds += ["device"] if self.devices else []
        actions: list[Action] = []
        for _ in range(self.rng.randint(1, 3)):
            actions += self.one_pod_kind(self.rng.choice(kinds))
        pods = [a.name for a in actions if a.kind == "Pod"]
        self.steps.append(Step(f"pods {pods}", actions))

    def one_pod_kind(self, kind: str) -> list[Action]:
        cpu, mem = self.request()
        priority = self.priority()
        if kind == "replicas":
            count = self.rng.randint(2, 4)
            klass = f"rs{self.pods_made}"
            self.pods_made += 1
            names = [f"{klass}-{i}" for i in range(count)]
            self.features.add("replicas")
            return [self._add(self.pod(n, klass, cpu, mem, priority), priority) for n in names]
        name = f"p{self.pods_made}"
        self.pods_made += 1
        body = self.pod(name, name, cpu, mem, priority)
        spec = body["spec"]
        extra: list[Action] = []
        if kind == "selector":
            spec["nodeSelector"] = {DISK_KEY: "ssd"}
            self.features.add("node-selector")
        elif kind == "toleration":
            spec["tolerations"] = [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
            self.features.add("toleration")
        elif kind == "gated":
            spec["schedulingGates"] = [{"name": GATE}]
            self.gated.append(name)
            self.features.add("scheduling-gates")
        elif kind == "volume":
            extra.append(self.claim(name))
            spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": name}}]
            self.features.add("volumes")
        elif kind == "device":
            extra.append(self.resource_claim(name))
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
            spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
            self.features.add("devices")
        return [*extra, self._add(body, priority)]

    def _add(self, body: dict[str, Any], priority: str | None) -> Action:
        name = body["metadata"]["name"]
        self.pods.append(name)
        if priority == "gang-low":
            self.low.append(name)
        return create(body)

    def claim(self, name: str) -> Action:
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {
                "storageClassName": self.storage_class,
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
            "status": {"phase": "Pending"},
        }
        self.waiting_claims.append(name)
        return create(body)

    def resource_claim(self, name: str) -> Action:
        exactly = {"deviceClassName": self.device_class, "count": self.rng.choice((1, 1, 2))}
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        }
        return create(body)

    # -- events ----------------------------------------------------------------------------------------
    def event(self) -> bool:
        """One cluster event drawn among those that apply now; False when the drawn one does not."""
        kind = self.rng.choice(
            ["add", "label", "taint", "untaint", "cordon", "uncordon", "delete-node", "delete-pods", "ungate",
             "pv", "slice", "pdb"]
        )  # fmt: skip
        handler = getattr(self, "event_" + kind.replace("-", "_"))
        return bool(handler())

    def node_event(self, label: str, node: _Node, operations: list[dict[str, Any]], feature: str) -> bool:
        self.features.add(feature)
        self.steps.append(Step(f"{label} {node.name}", [patch("Node", node.name, operations)]))
        return True

    def event_add(self) -> bool:
        self.features.add("node-added")
        actions = [self.new_node()]
        if self.devices and self.rng.random() < 0.5:
            actions.append(self.resource_slice(self.nodes[-1]))
        self.steps.append(Step(f"node {actions[0].name} added", actions, node_sync=True))
        return True

    def event_label(self) -> bool:
        plain = [n for n in self.nodes if DISK_KEY not in n.labels]
        if not plain:
            return False
        node = self.rng.choice(plain)
        node.labels[DISK_KEY] = "ssd"
        operation = {"op": "add", "path": f"/metadata/labels/{_escape(DISK_KEY)}", "value": "ssd"}
        return self.node_event("label disk=ssd on", node, [operation], "node-labelled")

    def event_taint(self) -> bool:
        free = [n for n in self.nodes if not n.taints]
        if not free:
            return False
        node = self.rng.choice(free)
        effect = self.rng.choice(("NoSchedule", "NoSchedule", "PreferNoSchedule"))
        node.taints = [{"key": TAINT_KEY, "value": "yes", "effect": effect}]
        operation = {"op": "add", "path": "/spec/taints", "value": node.taints}
        return self.node_event(f"taint {effect}", node, [operation], "node-tainted")

    def event_untaint(self) -> bool:
        tainted = [n for n in self.nodes if n.taints]
        if not tainted:
            return False
        node = self.rng.choice(tainted)
        node.taints = []
        return self.node_event("untaint", node, [{"op": "remove", "path": "/spec/taints"}], "node-untainted")

    def event_cordon(self) -> bool:
        free = [n for n in self.nodes if not n.cordoned]
        if len(free) < 2:
            return False
        node = self.rng.choice(free)
        node.cordoned = True
        operation = {"op": "add", "path": "/spec/unschedulable", "value": True}
        return self.node_event("cordon", node, [operation], "node-cordoned")

    def event_uncordon(self) -> bool:
        cordoned = [n for n in self.nodes if n.cordoned]
        if not cordoned:
            return False
        node = self.rng.choice(cordoned)
        node.cordoned = False
        operation = {"op": "add", "path": "/spec/unschedulable", "value": False}
        return self.node_event("uncordon", node, [operation], "node-uncordoned")

    def event_delete_node(self) -> bool:
        if len(self.nodes) < 3:
            return False
        node = self.rng.choice(self.nodes)
        self.nodes.remove(node)
        self.features.add("node-deleted")
        self.steps.append(Step(f"node {node.name} deleted", [delete("Node", node.name)], node_sync=True))
        return True

    def event_delete_pods(self) -> bool:
        if not self.pods:
            return False
        victims = self.rng.sample(self.pods, min(len(self.pods), self.rng.randint(1, 2)))
        for name in victims:
            self.pods.remove(name)
            if name in self.low:
                self.low.remove(name)
            if name in self.gated:
                self.gated.remove(name)
        self.features.add("pods-deleted")
        self.steps.append(Step(f"pods deleted {victims}", [delete("Pod", name) for name in victims]))
        return True

    def event_ungate(self) -> bool:
        if not self.gated:
            return False
        name = self.gated.pop(0)
        self.features.add("gate-removed")
        operation = {"op": "remove", "path": "/spec/schedulingGates"}
        self.steps.append(Step(f"gate of {name} removed", [patch("Pod", name, [operation])]))
        return True

    def event_pv(self) -> bool:
        if not self.waiting_claims or not self.nodes:
            return False
        claim = self.waiting_claims.pop(0)
        node = self.rng.choice(self.nodes).name
        self.features.add("pv-created")
        self.steps.append(Step(f"PV for claim {claim} on {node}", [self.persistent_volume(claim, node)]))
        return True

    def event_slice(self) -> bool:
        bare = [n for n in self.nodes if not n.slice]
        if not self.devices or not bare:
            return False
        node = self.rng.choice(bare)
        self.features.add("resourceslice-created")
        self.steps.append(Step(f"ResourceSlice for {node.name}", [self.resource_slice(node)]))
        return True

    def event_pdb(self) -> bool:
        if not self.low:
            return False
        name = f"pdb{self.pdbs}"
        self.pdbs += 1
        allowed = self.rng.choice((0, 0, 1))
        body = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {TIER_KEY: "low"}}},
            "status": {
                "disruptionsAllowed": allowed,
                "currentHealthy": len(self.low),
                "desiredHealthy": max(0, len(self.low) - allowed),
                "expectedPods": len(self.low),
                "observedGeneration": 1,
            },
        }
        self.features.add("pdb")
        self.steps.append(Step(f"PodDisruptionBudget {name} (disruptionsAllowed {allowed})", [create(body)]))
        return True

    # -- the timeline ----------------------------------------------------------------------------------
    def build(self) -> Timeline:
        first = [*self.classes(), *(self.new_node() for _ in range(self.rng.randint(3, 5)))]
        if self.devices:
            first += [self.resource_slice(n) for n in self.nodes if self.rng.random() < 0.5]
        self.steps.append(Step("nodes", first, node_sync=True))
        self.burst()
        for _ in range(self.rng.randint(5, 8)):
            if self.rng.random() < 0.4 or not (self.event() or self.event()):
                self.burst()
        if self.priorities and "priority" in self.features:
            self.features.add("preemption")  # the harness's kubelet stand-in gives start times
        return Timeline(self.seed, self.namespace, self.profile, self.steps, sorted(self.features))


def generate_default_timeline(seed: int, profile: str) -> Timeline:
    """The default-profile timeline of ``seed`` for pods of ``profile``."""
    return _Builder(seed, profile).build()
