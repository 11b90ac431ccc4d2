"""Big clusters, exactly: scenarios of 100–5000 nodes where only a sample of the nodes is scored.

Below 100 nodes upstream judges every node, so the rest of the suite never compares node sampling:
``percentageOfNodesToScore`` (a profile's, or the adaptive ``50 − n/125`` percent), the search that begins at
the rotating ``nextStartNodeIndex`` and moves it by the nodes it processed, and the node tree's order (the
1st node of each zone, then the 2nd of each, …). These scenarios do. Upstream's search is racy with several
workers, so its configuration says ``parallelism: 1`` (``oracle.scheduler_config``): with one worker it
judges the nodes one after another from the start index, exactly as ours does, and the comparison is exact.

What makes sampling matter here: nodes in 2–5 zones of unequal size, their zones drawn at random (the node
tree order is not the name order), some nodes tainted, cordoned or without the label a pod asks for (the
search passes over infeasible nodes, which move the start index), pods with spread constraints, (anti-)
affinity and services (system default spreading), so scores differ between nodes and the sample decides.

Exactness needs both schedulers to start from the same index: the start index belongs to the scheduler
and moves with every cycle it ever ran. :func:`reset_search_start` brings it to 0 on both sides without
reading it: a pod that reaches Filter in a cluster of exactly one node moves it to ``(i + 1) mod 1 = 0``.
After that the only cycles are the probe (it judges all N nodes: ``(0 + N) mod N = 0``) and the pending pods,
one cycle each on each side; the in-process model (``sim.py``) starts at 0 too, so its sample is ours and
is compared with the nodes upstream scored (:func:`sampling_problems`). Nodes are created by many threads
(thousands, in seconds); watches deliver them in resourceVersion order, so :func:`create_nodes` returns them
in that order, which is the order both schedulers and the model add them to their node trees.

Pods never use ``matchFields`` on ``metadata.name`` (a PreFilter node-name result is a Go map, iterated in
random order upstream), have no priority (no preemption, whose dry run starts at a random offset) and request
a cpu amount of their own (no two pods share upstream's batching signature).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.conformance.generator import APPS, HOSTNAME_KEY, REGION_KEY, ZONE_KEY, PendingPod, Scenario

#: The full run's node counts (scenario i takes BIG_SIZES[i % len]); the quick test uses 500.
BIG_SIZES = (1000, 5000, 2000, 1200, 3000)
#: Threads that create a big scenario's nodes.
CREATE_THREADS = 8
RESET_NODE = "conformance-reset"
PAUSE = "registry.k8s.io/pause:3.10"
#: A scenario of this many nodes or more is big: its start index is reset and its sample compared.
BIG_THRESHOLD = 100


def big_size_for(index: int) -> int:
    return BIG_SIZES[index % len(BIG_SIZES)]


# -- the scenario ------------------------------------------------------------------------------------
def generate_big(seed: int, nodes: int, pods: int | None = None) -> Scenario:
    """A seeded big-cluster scenario of ``nodes`` nodes (``pods`` pending pods, default 10–16)."""
    rng = random.Random(seed)
    namespace = f"b{seed}"
    scenario = Scenario(seed=seed, size=f"big-{nodes}")
    scenario.namespaces.append(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {"conformance/big": "1"}}}
    )
    zones = [f"zone-{chr(ord('a') + i)}" for i in range(rng.randint(2, 5))]
    weights = [rng.uniform(0.5, 3.0) for _ in zones]
    regions = ("region-1", "region-2") if len(zones) > 2 and rng.random() < 0.5 else ("region-1",)
    free: dict[str, int] = {}
    for i in range(nodes):
        node, cpu = _node(rng, f"b{seed}-n{i:05d}", zones, weights, regions)
        scenario.nodes.append(node)
        if not node["spec"].get("unschedulable") and not node["spec"].get("taints"):
            free[node["metadata"]["name"]] = cpu
    for app in APPS:
        scenario.services.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": f"svc-{app}", "namespace": namespace},
                "spec": {"selector": {"app": app}, "ports": [{"port": 80}]},
            }
        )
    names = sorted(free)
    for i in range(min(nodes // 8, 250)):
        node_name = rng.choice(names)
        cpu = rng.choice([250, 500, 1000])
        if free[node_name] < cpu:
            continue
        free[node_name] -= cpu
        spec = {"nodeName": node_name, "containers": [_container(f"{cpu}m", rng)], "terminationGracePeriodSeconds": 0}
        metadata = {"name": f"e{i:03d}", "namespace": namespace, "labels": {"app": rng.choice(APPS)}}
        scenario.existing_pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
    count = pods if pods is not None else rng.randint(10, 16)
    for i in range(count):
        scenario.pending.append(_pending(rng, namespace, i, len(zones)))
    return scenario


def _node(
    rng: random.Random, name: str, zones: Sequence[str], weights: Sequence[float], regions: Sequence[str]
) -> tuple[dict[str, Any], int]:
    cpu = rng.choice([4000, 8000, 8000, 16000])
    alloc = {"cpu": str(cpu // 1000), "memory": f"{rng.choice([8, 16, 32])}Gi", "pods": "110"}
    labels = {HOSTNAME_KEY: name, "kubernetes.io/os": "linux", "rank": str(rng.randint(1, 20))}
    if rng.random() < 0.97:  # a few nodes without a zone: a zone key of their own ("") in the node tree
        zone = rng.choices(list(zones), weights=list(weights))[0]
        labels[ZONE_KEY] = zone
        labels[REGION_KEY] = regions[zones.index(zone) % len(regions)]
    if rng.random() < 0.6:
        labels["disk"] = rng.choice(["ssd", "hdd"])
    if rng.random() < 0.15:
        labels["pool"] = "batch"
    spec: dict[str, Any] = {}
    roll = rng.random()
    if roll < 0.18:  # infeasible for most pods: the search passes over them
        spec["taints"] = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
    elif roll < 0.23:
        spec["taints"] = [{"key": "spot", "effect": "PreferNoSchedule"}]
    if rng.random() < 0.05:
        spec["unschedulable"] = True
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
    }
    return node, cpu


def _container(cpu: str, rng: random.Random) -> dict[str, Any]:
    memory = f"{rng.choice([128, 256, 512, 1024])}Mi"
    return {"name": "c", "image": PAUSE, "resources": {"requests": {"cpu": cpu, "memory": memory}}}


#: The pending pods' menu: (feature, plugins it exercises, weight).
_MENU: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("plain", ("NodeResourcesFit",), 5),  # services' system default spreading only: most nodes feasible
    ("spread-zone-hard", ("PodTopologySpread",), 2),
    ("spread-host-soft", ("PodTopologySpread",), 2),
    ("anti-affinity-host", ("InterPodAffinity",), 2),
    ("affinity-zone-preferred", ("InterPodAffinity",), 2),
    ("disk-ssd", ("NodeAffinity",), 2),
    ("disk-any", ("NodeAffinity",), 4),  # 60 % of the nodes: more feasible than sampled, many passed over
    ("rank-preferred", ("NodeAffinity",), 3),
    ("pool-batch", ("NodeAffinity",), 1),
    ("tolerate-infra", ("TaintToleration",), 2),
    ("big-request", ("NodeResourcesFit",), 1),
    ("nowhere", ("NodeAffinity",), 1),
)


def _pending(rng: random.Random, namespace: str, index: int, zones: int) -> PendingPod:
    app = rng.choice(APPS)
    # A cpu request of its own per pod: no two pods share a batching signature.
    cpu = rng.choice([100, 250, 500, 1000]) + index + 1
    draws = 1 if rng.random() < 0.4 else rng.randint(1, 3)
    features = {"plain"} if draws == 1 and rng.random() < 0.5 else set()
    features |= set(rng.choices([m[0] for m in _MENU], weights=[m[2] for m in _MENU], k=draws))
    spec: dict[str, Any] = {"containers": [_container(f"{cpu}m", rng)], "terminationGracePeriodSeconds": 0}
    if "big-request" in features:
        spec["containers"][0]["resources"]["requests"]["cpu"] = f"{9000 + index}m"
    selector = {"matchLabels": {"app": app}}
    spreads = []
    if "spread-zone-hard" in features:
        spreads.append(
            {"maxSkew": rng.choice([1, 2, 5]), "topologyKey": ZONE_KEY, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": selector, "minDomains": rng.choice([1, zones])}
        )  # fmt: skip
    if "spread-host-soft" in features:
        spreads.append(
            {"maxSkew": 1, "topologyKey": HOSTNAME_KEY, "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": selector}
        )  # fmt: skip
    if spreads:
        spec["topologySpreadConstraints"] = spreads
    affinity: dict[str, Any] = {}
    if "anti-affinity-host" in features:
        term = {"labelSelector": selector, "topologyKey": HOSTNAME_KEY}
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    if "affinity-zone-preferred" in features:
        term = {"labelSelector": {"matchLabels": {"app": rng.choice(APPS)}}, "topologyKey": ZONE_KEY}
        preferred = [{"weight": rng.randint(1, 100), "podAffinityTerm": term}]
        affinity["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": preferred}
    node_terms = []
    if "disk-ssd" in features:
        node_terms.append({"key": "disk", "operator": "In", "values": ["ssd"]})
    elif "disk-any" in features:
        node_terms.append({"key": "disk", "operator": "Exists"})
    if "nowhere" in features:
        node_terms.append({"key": "disk", "operator": "In", "values": ["tape"]})
    if node_terms:
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": node_terms}]}
        }
    if "rank-preferred" in features:
        preference = {"matchExpressions": [{"key": "rank", "operator": "Gt", "values": [str(rng.randint(5, 15))]}]}
        affinity.setdefault("nodeAffinity", {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.randint(1, 100), "preference": preference}
        ]
    if affinity:
        spec["affinity"] = affinity
    if "pool-batch" in features:
        spec["nodeSelector"] = {"pool": "batch"}
    if "tolerate-infra" in features:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]
    plugins = sorted({p for name, ps, _ in _MENU if name in features for p in ps})
    metadata = {"name": f"p{index:02d}", "namespace": namespace, "labels": {"app": app}}
    return PendingPod(index, {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}, tuple(plugins))


# -- the harness's part ---------------------------------------------------------------------------------
def create_nodes(
    create: Callable[[Mapping[str, Any]], dict[str, Any]], nodes: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Create ``nodes`` (many threads when there are many) and return them as created, in resourceVersion
    order: the order the watches deliver them, so the order both schedulers' node trees take them in."""
    if len(nodes) < BIG_THRESHOLD:
        return [create(node) for node in nodes]
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        created = list(pool.map(create, nodes))
    return sorted(created, key=lambda obj: int(obj["metadata"]["resourceVersion"]))


def reset_node() -> dict[str, Any]:
    labels = {HOSTNAME_KEY: RESET_NODE}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": RESET_NODE, "labels": labels},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}}}  # fmt: skip


def sampling_problems(upstream_scored: Mapping[str, int], model_feasible: set[str], used_hint: bool) -> list[str]:
    """Where upstream's sample (the nodes it scored) differs from ours (the model's, which starts from the
    same index); a batching hint means upstream searched no nodes, so the start indexes parted."""
    problems = []
    if used_hint:
        problems.append("sampling: upstream took a batching hint and searched no nodes (start indexes part)")
    if upstream_scored and model_feasible and set(upstream_scored) != model_feasible:
        only_upstream = len(set(upstream_scored) - model_feasible)
        only_ours = len(model_feasible - set(upstream_scored))
        problems.append(
            f"sampling: upstream scored {len(upstream_scored)} nodes, ours {len(model_feasible)} "
            f"({only_upstream} only upstream's, {only_ours} only ours)"
        )
    return problems
