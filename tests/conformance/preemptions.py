"""Preemption in the generated scenarios: full nodes, low-priority pods running there, PDBs, and preemptors.

Why a separate layer: with DefaultPreemption on both sides, any pending pod that fits nowhere and outranks a
running pod preempts, so every scenario exercises it a little (priority classes were always drawn). To make
it decide often and in every way, a share of the seeds (drawn from ``random.Random(f"preemption-{seed}")``,
so the rest of the scenario keeps its objects) also gets:

- priorities on the existing pods (``conformance-low``, none = 0, sometimes ``conformance-high``, which
  cannot be preempted by a pending pod of the same class);
- *filler* pods with low priority that take most of the CPU left on some nodes (never more than
  allocatable), so high-priority pods fit only by preempting;
- PodDisruptionBudgets (policy/v1) over the existing pods' ``app`` labels, with ``minAvailable`` or
  ``maxUnavailable`` as integers and the status the disruption controller would write if every selected pod
  were healthy (the light control plane runs no controller-manager, so the runner writes it):
  ``disruptionsAllowed = healthy - desired``, at least 0, where healthy counts the selected pods that are not
  terminating, finished or in ``disruptedPods`` (sometimes one recently evicted pod is listed there);
- more pending pods with ``conformance-high``, some of them large, and some with ``conformance-high-never``
  (same value, ``preemptionPolicy: Never``: upstream's PostFilter says ``not eligible due to
  preemptionPolicy=Never.``).

A pending pod that can preempt (its priority class preempts and some existing pod has a lower priority)
records ``DefaultPreemption`` in its features.
"""

from __future__ import annotations

import random
from typing import Any

#: The third priority class (the runner creates it beside generator.PRIORITY_CLASSES): high, but never preempts.
NEVER_CLASS = "conformance-high-never"
NEVER_CLASS_VALUE = 1000
PREEMPTION = "DefaultPreemption"
#: The share of seeds that get the preemption layer.
SHARE = 0.45
#: Pod priorities by class (generator.PRIORITY_CLASSES plus the Never class); no class = 0.
_VALUES = {"conformance-high": 1000, "conformance-low": -100, NEVER_CLASS: NEVER_CLASS_VALUE}
_PREEMPTING = {"conformance-high": 1000, "conformance-low": -100}


def _milli(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def pod_cpu_upper_bound(spec: dict[str, Any]) -> int:
    """An upper bound of the CPU (millicores) a pod takes on its node: containers, init, pod-level, overhead."""

    def request(container: dict[str, Any]) -> int:
        return _milli(str(((container.get("resources") or {}).get("requests") or {}).get("cpu", "0")))

    total = sum(request(c) for c in (*spec.get("containers", ()), *spec.get("initContainers", ())))
    pod_level = _milli(str(((spec.get("resources") or {}).get("requests") or {}).get("cpu", "0")))
    overhead = 250 if spec.get("runtimeClassName") else 0
    return max(total, pod_level) + overhead


def _mebi(text: str) -> int:
    return int(text[:-2]) * (1024 if text.endswith("Gi") else 1) if text[-2:] in ("Mi", "Gi") else 0


def pod_memory_upper_bound(spec: dict[str, Any]) -> int:
    """The same bound for memory (MiB; the generator writes memory in Mi and Gi only)."""

    def request(container: dict[str, Any]) -> int:
        return _mebi(str(((container.get("resources") or {}).get("requests") or {}).get("memory", "0Mi")))

    total = sum(request(c) for c in (*spec.get("containers", ()), *spec.get("initContainers", ())))
    pod_level = _mebi(str(((spec.get("resources") or {}).get("requests") or {}).get("memory", "0Mi")))
    overhead = 64 if spec.get("runtimeClassName") else 0
    return max(total, pod_level) + overhead


def priority(pod: dict[str, Any]) -> int:
    return _VALUES.get(str(pod["spec"].get("priorityClassName", "")), 0)


def add_preemption(scenario: Any, namespace: str) -> None:
    """Make ``scenario`` a preemption scenario, or leave it as it is (decided by its seed alone)."""
    rng = random.Random(f"preemption-{scenario.seed}")
    if rng.random() < SHARE:
        _existing_priorities(rng, scenario)
        _fillers(rng, scenario, namespace)
        _budgets(rng, scenario, namespace)
        _preemptors(rng, scenario)
    _mark_preemptors(scenario)


def _existing_priorities(rng: random.Random, scenario: Any) -> None:
    for pod in scenario.existing_pods:
        roll = rng.random()
        if roll < 0.45:
            pod["spec"]["priorityClassName"] = "conformance-low"
        elif roll < 0.55:
            pod["spec"]["priorityClassName"] = "conformance-high"


def _fillers(rng: random.Random, scenario: Any, namespace: str) -> None:
    used: dict[str, int] = {}
    memory: dict[str, int] = {}
    count: dict[str, int] = {}
    for pod in scenario.existing_pods:
        node = pod["spec"]["nodeName"]
        used[node] = used.get(node, 0) + pod_cpu_upper_bound(pod["spec"])
        memory[node] = memory.get(node, 0) + pod_memory_upper_bound(pod["spec"])
        count[node] = count.get(node, 0) + 1
    index = 0
    for node in scenario.nodes:
        name = node["metadata"]["name"]
        allocatable = node["status"]["allocatable"]
        free = _milli(str(allocatable["cpu"])) - used.get(name, 0)
        room = int(allocatable["pods"]) - count.get(name, 0)
        if node.get("spec", {}).get("unschedulable") or rng.random() < 0.4 or free < 400 or room < 1:
            continue
        pieces = min(room, rng.randint(1, 3))
        share = (free - rng.choice([0, 100, 250])) // pieces // 50 * 50
        mem = rng.choice([128, 512])
        free_mem = _mebi(str(allocatable["memory"])) - memory.get(name, 0)
        if share < 100 or mem * pieces > free_mem:
            continue
        for _ in range(pieces):
            app = rng.choice(("web", "db", "cache", "batch", "api"))
            spec: dict[str, Any] = {
                "nodeName": name,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": f"{share}m", "memory": f"{mem}Mi"}},
                    }
                ],
            }
            if rng.random() < 0.85:
                spec["priorityClassName"] = "conformance-low"
            if node.get("spec", {}).get("taints"):
                spec["tolerations"] = [{"operator": "Exists"}]
            labels = {"app": app, "tier": rng.choice(("frontend", "backend")), "filler": "yes"}
            scenario.existing_pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"f{index:02d}", "namespace": namespace, "labels": labels},
                    "spec": spec,
                }
            )
            index += 1


def _selected(scenario: Any, namespace: str, app: str) -> list[dict[str, Any]]:
    return [
        pod
        for pod in scenario.existing_pods
        if pod["metadata"]["namespace"] == namespace and (pod["metadata"].get("labels") or {}).get("app") == app
    ]


def _healthy(pod: dict[str, Any], disrupted: set[str]) -> bool:
    from tests.conformance.generator import LIFECYCLE_ANNOTATION  # the generator imports this module

    lifecycle = (pod["metadata"].get("annotations") or {}).get(LIFECYCLE_ANNOTATION)
    return lifecycle is None and pod["metadata"]["name"] not in disrupted


def budget_status(spec: dict[str, Any], pods: list[dict[str, Any]], disrupted: dict[str, str]) -> dict[str, Any]:
    """The status the disruption controller would write, every selected pod counted healthy if it can be."""
    healthy = sum(_healthy(pod, set(disrupted)) for pod in pods)
    expected = len(pods)
    # An integer minAvailable is what it says; maxUnavailable counts down from the selected pods.
    desired = int(spec["minAvailable"]) if "minAvailable" in spec else max(0, expected - int(spec["maxUnavailable"]))
    status: dict[str, Any] = {
        "observedGeneration": 1,
        "disruptionsAllowed": max(0, healthy - desired),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
    }
    if disrupted:
        status["disruptedPods"] = dict(disrupted)
    return status


def _budgets(rng: random.Random, scenario: Any, namespace: str) -> None:
    apps = sorted({(p["metadata"].get("labels") or {}).get("app", "") for p in scenario.existing_pods} - {""})
    for app in rng.sample(apps, k=min(len(apps), rng.randint(1, 3))):
        pods = _selected(scenario, namespace, app)
        spec: dict[str, Any] = {"selector": {"matchLabels": {"app": app}}}
        if rng.random() < 0.7:
            spec["minAvailable"] = rng.randint(0, max(1, len(pods)))
        else:
            spec["maxUnavailable"] = rng.randint(0, 2)
        disrupted: dict[str, str] = {}
        running = [p for p in pods if _healthy(p, set())]
        if running and rng.random() < 0.15:
            disrupted[rng.choice(running)["metadata"]["name"]] = "2026-01-01T00:00:00Z"
        scenario.budgets.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": f"pdb-{app}", "namespace": namespace},
                "spec": spec,
                "status": budget_status(spec, pods, disrupted),
            }
        )


def _preemptors(rng: random.Random, scenario: Any) -> None:
    for pending in scenario.pending:
        spec = pending.manifest["spec"]
        roll = rng.random()
        if roll < 0.35:
            spec["priorityClassName"] = "conformance-high"
        elif roll < 0.45:
            spec["priorityClassName"] = NEVER_CLASS
        if spec.get("priorityClassName") in ("conformance-high", NEVER_CLASS) and rng.random() < 0.35:
            main = spec["containers"][0]
            requests = main.setdefault("resources", {}).setdefault("requests", {})
            requests["cpu"] = rng.choice(["1500m", "2", "3", "6"])
            if "resources" in spec:  # pod-level requests must cover the containers
                spec["resources"]["requests"]["cpu"] = "12"


def _mark_preemptors(scenario: Any) -> None:
    """``DefaultPreemption`` is among the features of a pod that may preempt some existing pod."""
    lowest = min((priority(p) for p in scenario.existing_pods), default=None)
    for pending in scenario.pending:
        spec = pending.manifest["spec"]
        preempting = spec.get("priorityClassName") in _PREEMPTING
        may = preempting and lowest is not None and priority(pending.manifest) > lowest
        if (may or spec.get("priorityClassName") == NEVER_CLASS) and PREEMPTION not in pending.features:
            pending.features = tuple(sorted({*pending.features, PREEMPTION}))


def _pinned_pod(
    name: str, cpu: str, namespace: str, *, node: str | None = None, cls: str | None = None, app: str = "x"
) -> dict[str, Any]:
    container = {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0, "containers": [container]}
    if node:
        spec["nodeName"] = node
    if cls:
        spec["priorityClassName"] = cls
    meta = {"name": name, "namespace": namespace, "labels": {"app": app}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _pinned_nodes(*names: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}},
        }
        for name in names
    ]


def terminating_victim_scenario() -> Any:
    """A victim already terminating: upstream counts it among the victims but calls no API for it.

    One node of 2 CPU with two ``conformance-low`` pods of 900m, ``t0`` deleted but held by a finalizer. A
    ``conformance-high`` pod of 1500m preempts both: ``e1`` through the API, ``t0`` not at all (it never
    goes, so the preemptor stays nominated and unbound). A second such pod finds only ``t0`` in its way:
    nominated again, with no victim to call the API for.
    """
    from tests.conformance.generator import HOLD_FINALIZER, LIFECYCLE_ANNOTATION, TERMINATING, PendingPod, Scenario

    held = _pinned_pod("t0", "900m", "term", node="term-n0", cls="conformance-low")
    held["metadata"]["annotations"] = {LIFECYCLE_ANNOTATION: TERMINATING}
    held["metadata"]["finalizers"] = [HOLD_FINALIZER]
    features = ("DefaultPreemption", "NodeResourcesFit")
    return Scenario(
        seed=0,
        size="small",
        namespaces=[{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "term"}}],
        nodes=_pinned_nodes("term-n0"),
        existing_pods=[held, _pinned_pod("e1", "900m", "term", node="term-n0", cls="conformance-low")],
        pending=[
            PendingPod(0, _pinned_pod("p", "1500m", "term", cls="conformance-high"), features),
            PendingPod(1, _pinned_pod("q", "1500m", "term", cls="conformance-high"), features),
        ],
    )


def pinned_scenario() -> Any:
    """A fixed preemption case for the quick test: a PDB turns preemption away from the cheaper node.

    Two nodes of 2 CPU, both full: ``pin-n0`` holds two ``conformance-low`` pods of 900m, one of them under a
    PDB that allows no disruption; ``pin-n1`` one priority-0 pod of 1800m. A ``conformance-high`` pod of 1500m
    fits nowhere. Without the PDB upstream would preempt both low pods (lower highest priority); with it,
    ``pin-n0`` would violate the budget, so it preempts the one pod on ``pin-n1``. Then a 1500m pod of
    ``conformance-high-never`` is refused preemption (``not eligible due to preemptionPolicy=Never.``).
    """
    from tests.conformance.generator import PendingPod, Scenario  # the generator imports this module

    existing = [
        _pinned_pod("e0", "900m", "pin", node="pin-n0", cls="conformance-low", app="guarded"),
        _pinned_pod("e1", "900m", "pin", node="pin-n0", cls="conformance-low"),
        _pinned_pod("e2", "1800m", "pin", node="pin-n1", app="other"),
    ]
    spec = {"selector": {"matchLabels": {"app": "guarded"}}, "minAvailable": 1}
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded", "namespace": "pin"},
        "spec": spec,
        "status": budget_status(spec, existing[:1], {}),
    }
    features = ("DefaultPreemption", "NodeResourcesFit")
    return Scenario(
        seed=0,
        size="small",
        namespaces=[{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pin"}}],
        nodes=_pinned_nodes("pin-n0", "pin-n1"),
        existing_pods=existing,
        pending=[
            PendingPod(0, _pinned_pod("p", "1500m", "pin", cls="conformance-high"), features),
            PendingPod(1, _pinned_pod("q", "1500m", "pin", cls=NEVER_CLASS), features),
        ],
        budgets=[budget],
    )
