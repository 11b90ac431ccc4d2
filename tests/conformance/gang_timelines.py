"""Seeded timelines of gang (workload-aware) scheduling: what :mod:`tests.conformance.timeline_harness` plays.

Why timelines: a gang is decided over time. Its pods wait at PreEnqueue until ``minCount`` of them exist, its
pod-group cycle places all of them or none, a late member joins a gang already scheduled, a node added later
wakes a gang that did not fit. One verdict per pod cannot show that (issue 37, item 1: multi-step scenarios),
so a scenario here is a :class:`Timeline`: steps of API actions, the state compared after each.

A timeline is a function of its seed alone (``random.Random(seed)``). Its parts:

- step 0 creates the nodes (3-6), every one with a distinct cpu and memory, and in most timelines every pod
  prefers the nodes with a distinct weight each (preferred node affinity), so the scores rank the nodes apart
  (the harness still recognises a tie upstream broke differently);
- then 4-7 steps, each of one kind: a gang (a PodGroup with a gang policy and members: all of them, fewer than
  ``minCount`` so the rest come later, or more than ``minCount``), its late members, an extra member of a gang
  already placed, a group with the basic policy, pods whose PodGroup comes in a later step, plain pods (no
  group) mixed in, a node added, bound plain pods deleted (both wake waiting pods through cluster events);
- behind switches the lead turns on once the features are merged: ``topology`` gives some PodGroups
  ``schedulingConstraints.topology`` (a rack or zone key; TopologyAwareWorkloadScheduling), ``preemption`` gives
  groups and pods priority classes and ``disruptionMode`` and adds low-priority fillers that a high-priority gang
  or pod can only fit by preempting (WorkloadAwarePreemption).

Members of one gang are identical (one pod "class", :data:`CLASS_ANNOTATION`): which of two identical members
got which node is not a decision the harness compares, only the multiset of their outcomes.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.conformance.generator import HOSTNAME_KEY, ZONE_KEY

#: Pods of one class are interchangeable: their outcomes are compared as a multiset.
CLASS_ANNOTATION = "conformance.kopf-scheduler.io/class"
RACK_KEY = "conformance.kopf-scheduler.io/rack"
PODGROUP_API = "scheduling.k8s.io/v1alpha2"
#: Priority classes the timelines use (created once per cluster by the harness).
GANG_PRIORITY_CLASSES = {"gang-low": 10, "gang-high": 1000}
FEATURES = ("topology", "preemption")
PAUSE = "registry.k8s.io/pause:3.10"


@dataclass(frozen=True)
class Action:
    """One API call: ``create`` an object, or ``delete`` the object ``kind``/``name`` (namespaced or not)."""

    verb: str
    kind: str
    name: str
    body: dict[str, Any] | None = None

    def describe(self) -> str:
        return f"{self.verb} {self.kind}/{self.name}"


@dataclass
class Step:
    label: str
    actions: list[Action]
    #: Nodes were added or removed: wait until both schedulers' caches hold exactly the cluster's nodes.
    node_sync: bool = False


@dataclass
class Timeline:
    seed: int
    namespace: str
    profile: str
    steps: list[Step]
    #: What the timeline exercises (gang, late-members, partial, plain, basic, ..., topology, preemption).
    features: list[str] = field(default_factory=list)

    @property
    def needs_start_times(self) -> bool:
        """Preemption's tie-breaks read start times: the harness's kubelet stand-in must set them."""
        return "preemption" in self.features

    def describe(self) -> str:
        return "; ".join(f"{i}: {s.label}" for i, s in enumerate(self.steps))


def _node(name: str, cpu_m: int, mem_gi: int, zone: str, rack: str) -> dict[str, Any]:
    labels = {HOSTNAME_KEY: name, ZONE_KEY: zone, RACK_KEY: rack}
    allocatable = {"cpu": f"{cpu_m}m", "memory": f"{mem_gi}Gi", "pods": "32"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def pod_manifest(
    name: str,
    namespace: str,
    profile: str,
    cpu_m: int,
    mem_mi: int,
    *,
    klass: str,
    group: str | None = None,
    priority_class: str | None = None,
    preference: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    container = {
        "name": "c",
        "image": PAUSE,
        "resources": {"requests": {"cpu": f"{cpu_m}m", "memory": f"{mem_mi}Mi"}},
    }
    spec: dict[str, Any] = {"schedulerName": profile, "terminationGracePeriodSeconds": 0, "containers": [container]}
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if preference:
        terms = [
            {
                "weight": weight,
                "preference": {"matchExpressions": [{"key": HOSTNAME_KEY, "operator": "In", "values": [node]}]},
            }
            for node, weight in sorted(preference.items())
        ]
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": {CLASS_ANNOTATION: klass}},
        "spec": spec,
    }


def pod_group_manifest(
    name: str,
    namespace: str,
    *,
    min_count: int | None,
    topology_key: str | None = None,
    priority_class: str | None = None,
    disruption_mode: str | None = None,
) -> dict[str, Any]:
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if topology_key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if disruption_mode is not None:
        spec["disruptionMode"] = disruption_mode
    return {
        "apiVersion": PODGROUP_API,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def create(obj: dict[str, Any]) -> Action:
    return Action("create", str(obj["kind"]), str(obj["metadata"]["name"]), obj)


def delete(kind: str, name: str) -> Action:
    return Action("delete", kind, name)


@dataclass
class _Gang:
    name: str
    klass: str
    min_count: int
    members: int
    cpu_m: int
    mem_mi: int
    priority_class: str | None
    #: The node preferences when the gang was drawn: late members are identical to the first ones.
    preference: dict[str, int] | None = None
    created: int = 0


class _Builder:
    """The state of one timeline while it is drawn."""

    def __init__(self, seed: int, profile: str, switches: Iterable[str]) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.profile = profile
        self.switches = frozenset(switches)
        self.namespace = f"gang-{seed}"
        self.steps: list[Step] = []
        self.features: set[str] = set()
        self.nodes = 0
        self.pods = 0
        self.gangs: list[_Gang] = []
        self.plain: list[str] = []
        self.orphans: list[_Gang] = []  # members created before their PodGroup
        #: Most timelines give every pod the same preferred node affinity, a distinct weight per node: NodeAffinity
        #: then ranks the nodes apart, so upstream's random tie-break (which ends a timeline's comparison) is rare.
        self.preference: dict[str, int] | None = {} if self.rng.random() < 0.75 else None

    # -- drawing helpers -----------------------------------------------------------------------------------
    def new_nodes(self, count: int) -> list[Action]:
        rng = self.rng
        cpus = rng.sample(range(2000, 8001, 125), count)
        mems = rng.sample(range(3, 25), count)
        actions = []
        for cpu, mem in zip(cpus, mems, strict=True):
            index = self.nodes
            self.nodes += 1
            zone, rack = f"zone-{index % 2}", f"rack-{index % 3}"
            name = f"g{self.seed}-n{index}"
            actions.append(create(_node(name, cpu, mem, zone, rack)))
            if self.preference is not None:
                taken = set(self.preference.values())
                self.preference[name] = rng.choice([w for w in range(1, 101) if w not in taken])
        return actions

    def request(self) -> tuple[int, int]:
        return self.rng.choice((250, 500, 750, 1000, 1500, 2000, 3000)), self.rng.choice((256, 512, 1024, 2048, 4096))

    def priority(self) -> str | None:
        if "preemption" not in self.switches:
            return None
        return self.rng.choice((None, "gang-low", "gang-high"))

    def members(self, gang: _Gang, count: int) -> list[Action]:
        actions = []
        for _ in range(count):
            name = f"{gang.name}-{gang.created}"
            gang.created += 1
            pod = pod_manifest(
                name,
                self.namespace,
                self.profile,
                gang.cpu_m,
                gang.mem_mi,
                klass=gang.klass,
                group=gang.name,
                priority_class=gang.priority_class,
                preference=gang.preference,
            )
            actions.append(create(pod))
        return actions

    def group_object(self, gang: _Gang) -> Action:
        topology = None
        if "topology" in self.switches and self.rng.random() < 0.5:
            topology = self.rng.choice((ZONE_KEY, RACK_KEY))
            self.features.add("topology")
        disruption = None
        if "preemption" in self.switches and self.rng.random() < 0.5:
            disruption = self.rng.choice(("Pod", "PodGroup"))
            self.features.add("preemption")
        return create(
            pod_group_manifest(
                gang.name,
                self.namespace,
                min_count=gang.min_count or None,
                topology_key=topology,
                priority_class=gang.priority_class,
                disruption_mode=disruption,
            )
        )

    def new_gang(self, *, basic: bool = False) -> _Gang:
        index = len(self.gangs) + len(self.orphans)
        cpu, mem = self.request()
        min_count = 0 if basic else self.rng.randint(2, 5)
        members = max(1, min_count + self.rng.choice((-2, -1, 0, 0, 0, 1, 2))) if not basic else self.rng.randint(2, 4)
        priority = self.priority()
        if priority is not None:
            self.features.add("preemption")
        preference = dict(self.preference) if self.preference is not None else None
        return _Gang(f"pg{index}", f"pg{index}", min_count, members, cpu, mem, priority, preference)

    # -- the kinds of steps --------------------------------------------------------------------------------
    def step_gang(self) -> None:
        gang = self.new_gang()
        first = gang.members
        self.features.add("gang")
        if gang.members < gang.min_count:
            self.features.add("late-members")
        elif gang.members > gang.min_count:
            self.features.add("more-than-minCount")
        actions = [self.group_object(gang), *self.members(gang, first)]
        self.gangs.append(gang)
        self.steps.append(
            Step(f"gang {gang.name} minCount={gang.min_count} x{first} ({gang.cpu_m}m/{gang.mem_mi}Mi)", actions)
        )

    def step_basic(self) -> None:
        gang = self.new_gang(basic=True)
        self.features.add("basic-policy")
        self.gangs.append(gang)
        actions = [self.group_object(gang), *self.members(gang, gang.members)]
        self.steps.append(Step(f"basic group {gang.name} x{gang.members} ({gang.cpu_m}m/{gang.mem_mi}Mi)", actions))

    def step_late_members(self) -> bool:
        waiting = [g for g in self.gangs if g.min_count and g.created < g.min_count]
        if not waiting:
            return False
        gang = self.rng.choice(waiting)
        count = gang.min_count - gang.created + self.rng.choice((0, 0, 1))
        self.steps.append(Step(f"late members of {gang.name} x{count}", self.members(gang, count)))
        return True

    def step_extra_member(self) -> bool:
        complete = [g for g in self.gangs if g.min_count and g.created >= g.min_count]
        if not complete:
            return False
        gang = self.rng.choice(complete)
        self.features.add("extra-member")
        self.steps.append(Step(f"one more member of {gang.name}", self.members(gang, 1)))
        return True

    def step_orphans(self) -> None:
        gang = self.new_gang()
        gang.members = max(gang.members, gang.min_count)
        self.features.add("group-after-pods")
        self.orphans.append(gang)
        self.steps.append(
            Step(f"members of {gang.name} before their PodGroup x{gang.members}", self.members(gang, gang.members))
        )

    def step_group_of_orphans(self) -> bool:
        if not self.orphans:
            return False
        gang = self.orphans.pop(0)
        self.gangs.append(gang)
        self.steps.append(Step(f"PodGroup {gang.name} minCount={gang.min_count} arrives", [self.group_object(gang)]))
        return True

    def step_plain(self) -> None:
        actions = []
        for _ in range(self.rng.randint(1, 3)):
            cpu, mem = self.request()
            name = f"plain{self.pods}"
            self.pods += 1
            self.plain.append(name)
            pod = pod_manifest(
                name,
                self.namespace,
                self.profile,
                cpu,
                mem,
                klass=name,
                priority_class=self.priority(),
                preference=self.preference,
            )
            actions.append(create(pod))
        self.features.add("plain-pods")
        self.steps.append(Step(f"plain pods {[a.name for a in actions]}", actions))

    def step_add_node(self) -> None:
        self.features.add("node-added")
        self.steps.append(Step("a node is added", self.new_nodes(1), node_sync=True))

    def step_delete_plain(self) -> bool:
        if not self.plain:
            return False
        victims = self.rng.sample(self.plain, min(len(self.plain), self.rng.randint(1, 2)))
        for name in victims:
            self.plain.remove(name)
        self.features.add("pods-deleted")
        self.steps.append(Step(f"plain pods deleted {victims}", [delete("Pod", name) for name in victims]))
        return True

    def step_fillers(self) -> None:
        """Low-priority plain pods that fill the nodes, so a later high-priority gang must preempt."""
        actions = []
        for _ in range(self.rng.randint(2, 4)):
            name = f"filler{self.pods}"
            self.pods += 1
            self.plain.append(name)
            cpu = self.rng.choice((1000, 1500, 2000, 3000))
            pod = pod_manifest(
                name,
                self.namespace,
                self.profile,
                cpu,
                1024,
                klass=name,
                priority_class="gang-low",
                preference=self.preference,
            )
            actions.append(create(pod))
        self.features.add("preemption")
        self.steps.append(Step(f"low-priority fillers {[a.name for a in actions]}", actions))

    def build(self) -> Timeline:
        self.steps.append(Step("nodes", self.new_nodes(self.rng.randint(3, 6)), node_sync=True))
        kinds = ["gang", "gang", "gang", "plain", "late", "extra", "orphans", "group", "node", "delete", "basic"]
        if "preemption" in self.switches:
            kinds += ["fillers", "fillers"]
        for _ in range(self.rng.randint(4, 7)):
            kind = self.rng.choice(kinds)
            done = {
                "late": self.step_late_members,
                "extra": self.step_extra_member,
                "group": self.step_group_of_orphans,
                "delete": self.step_delete_plain,
            }.get(kind, lambda: False)()
            if done:
                continue
            {
                "plain": self.step_plain,
                "orphans": self.step_orphans,
                "node": self.step_add_node,
                "basic": self.step_basic,
                "fillers": self.step_fillers,
            }.get(kind, self.step_gang)()
        while self.step_group_of_orphans():
            pass
        return Timeline(self.seed, self.namespace, self.profile, self.steps, sorted(self.features))


def generate_timeline(seed: int, profile: str, switches: Iterable[str] = ()) -> Timeline:
    """The timeline of ``seed`` for pods of ``profile``; ``switches`` ⊆ :data:`FEATURES`."""
    unknown = set(switches) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown switches {sorted(unknown)}; known: {list(FEATURES)}")
    return _Builder(seed, profile, switches).build()


def pinned_timelines(profile: str) -> list[Timeline]:
    """Hand-written timelines for the quick test: each behaviour of a gang once, on nodes without ties."""
    ns = "gang-pinned"
    nodes = [
        create(_node(f"pin-n{i}", cpu, mem, f"zone-{i % 2}", f"rack-{i}"))
        for i, (cpu, mem) in enumerate(((4000, 8), (3000, 12), (2000, 6)))
    ]

    def member(group: str, index: int, cpu: int) -> Action:
        return create(pod_manifest(f"{group}-{index}", ns, profile, cpu, 512, klass=group, group=group))

    def group(name: str, min_count: int) -> Action:
        return create(pod_group_manifest(name, ns, min_count=min_count))

    steps = [
        Step("nodes", copy.deepcopy(nodes), node_sync=True),
        # minCount 3, two members: both wait at PreEnqueue (no condition, no node).
        Step("gang a minCount=3 x2", [group("a", 3), member("a", 0, 1000), member("a", 1, 1000)]),
        # The third member completes the gang: all three bind in one pod-group cycle.
        Step("late member a-2", [member("a", 2, 1000)]),
        # A gang of four that only two nodes' worth of cpu can hold: nothing of it binds; its condition says why.
        Step("gang b minCount=4 x4 (does not fit)", [group("b", 4), *(member("b", i, 2500) for i in range(4))]),
        # A plain pod beside them, and one more member of the scheduled gang a (its quorum is already met).
        Step(
            "plain pod and an extra member of a",
            [create(pod_manifest("plain0", ns, profile, 500, 256, klass="plain0")), member("a", 3, 1000)],
        ),
        # A big node arrives: gang b now fits and binds as a whole.
        Step("a node is added", [create(_node("pin-n3", 12000, 24, "zone-1", "rack-3"))], node_sync=True),
        # Members before their PodGroup; then the PodGroup (minCount 2) arrives and wakes them.
        Step("members of c before their PodGroup", [member("c", 0, 250), member("c", 1, 250)]),
        Step("PodGroup c arrives", [group("c", 2)]),
    ]
    timeline = Timeline(
        0,
        ns,
        profile,
        steps,
        ["gang", "late-members", "partial", "plain-pods", "node-added", "extra-member", "group-after-pods"],
    )
    return [timeline]


def pinned_topology_timeline(profile: str) -> Timeline:
    """Hand-written: the topology-constrained gangs of seeds 582087/582093 (no domain holds the gang, so upstream
    words its members after a random first placement and may retry it without end) and 582091 (two domains
    fit alike: upstream's tie), then the gang bound in the one domain that a new node makes big enough."""
    ns = "gang-pinned-topology"
    nodes = [
        create(_node(f"top-n{i}", cpu, mem, f"zone-{i % 2}", f"rack-{i}"))
        for i, (cpu, mem) in enumerate(((4000, 8), (3000, 12), (2000, 6)))
    ]

    def member(group: str, index: int, cpu: int) -> Action:
        return create(pod_manifest(f"{group}-{index}", ns, profile, cpu, 512, klass=group, group=group))

    steps = [
        Step("nodes", copy.deepcopy(nodes), node_sync=True),
        # One rack each: top-n0 holds two members, the others one; no rack holds three.
        Step(
            "gang t minCount=3 x3 in one rack (no rack holds it)",
            [
                create(pod_group_manifest("t", ns, min_count=3, topology_key=RACK_KEY)),
                *(member("t", i, 1500) for i in range(3)),
            ],
        ),
        # rack-0 gains a node: the only rack that holds the gang now, all three bind there.
        Step("a node is added to rack-0", [create(_node("top-n3", 6000, 16, "zone-1", "rack-0"))], node_sync=True),
        # Two small members that either zone holds: upstream's placement scores may tie (a tie, not a verdict).
        Step(
            "gang u minCount=2 x2 in one zone",
            [
                create(pod_group_manifest("u", ns, min_count=2, topology_key=ZONE_KEY)),
                *(member("u", i, 250) for i in range(2)),
            ],
        ),
    ]
    return Timeline(0, ns, profile, steps, ["gang", "topology", "partial", "node-added"])
