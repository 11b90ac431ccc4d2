"""Inputs the other passes never put in front of the schedulers: gates, ``spec.nodeName``, declared features,
generic ephemeral volumes, DRA claim templates, shared claims, ``firstAvailable``, percentage PDBs.

Why a pass of its own: every object the older passes make keeps its seed (this pass draws from
``random.Random(f"coverage-{seed}")`` and runs last), while a share of the seeds gets each of:

- **scheduling gates** (upstream ``schedulinggates``): copies of pending pods with a gate, appended after the
  other pending pods. The API server writes ``PodScheduled=False, SchedulingGated`` on creation; upstream's
  PreEnqueue keeps the pod out of the active queue, so no scheduler may write anything for it. The runner
  compares the pod's state after a grace period (gate removal over time is the timeline harness's part,
  default_timelines.py).
- **``spec.nodeName`` preset** (upstream ``nodename``): one pod naming a node, the last pending pod (it may not
  fit there: it asks for more CPU than any node has). A pod with ``spec.nodeName`` is an *assigned* pod to
  kube-scheduler's informers (``assignedPod`` in ``eventhandlers.go``): it goes to the cache, never to the
  queue, so no scheduling cycle runs for it and the NodeName plugin, whose Filter reads the nodeName of a
  pod in a cycle, never sees one that has it set. NodeName therefore cannot be decisive in v1.36.3 (nor in
  preemption, which filters the same queued pods); what is compared is that neither scheduler touches it
  (no PodScheduled condition, no event) and both count it on its node for the pods after it.
- **declared features** (upstream ``nodedeclaredfeatures``, NodeDeclaredFeatures beta and on in 1.36): some
  nodes declare ``RestartAllContainersOnContainerExits`` in ``status.declaredFeatures``, and some pending pods
  get a container ``restartPolicyRules`` entry with the ``RestartAllContainers`` action, which the framework
  infers as a requirement: nodes not declaring it are rejected with
  ``node(s) didn't match Pod's required features``.
- **generic ephemeral volumes**: a pod with an ``ephemeral`` volume. The light control plane runs no
  ephemeral-volume controller, so its claim ``<pod>-<volume>`` never exists: VolumeBinding's PreFilter says
  ``waiting for ephemeral volume controller to create the persistentvolumeclaim "<name>"``.
- **DRA claim templates** (device scenarios): a pod claim with ``resourceClaimTemplateName`` and no
  ``status.resourceClaimStatuses`` entry (no resourceclaim controller runs here): DynamicResources' PreEnqueue
  refuses it (``ResourceClaim not created yet``), so, like a gated pod, it never reaches a cycle and nobody
  writes a condition or an event; the runner compares that state.
- **shared claims** (device scenarios): a later pending pod names an earlier pod's ResourceClaim too; if ours
  allocated it for the first, both schedulers must put the second where the devices are.
- **``firstAvailable``** (device scenarios): some claims' request becomes a list of subrequests (two big
  devices, else one of any kind); the allocation names the subrequest (``gpu/big``).
- **PDBs with percentages** (preemption scenarios): budgets written with ``minAvailable``/``maxUnavailable``
  as percentages, their status as the disruption controller computes it (both rounded up); and, in some,
  a budget over every pod with an ``app`` label (every existing pod has one) allowing no disruption, so
  every preemption candidate violates a PDB and upstream picks by the fewest violations.
"""

from __future__ import annotations

import copy
import math
import random
from typing import Any

from tests.conformance.preemptions import budget_status

GATE = "conformance.kopf-scheduler.io/hold"
DECLARED_FEATURE = "RestartAllContainersOnContainerExits"
GATED_SHARE, NODE_NAME_SHARE, DECLARED_SHARE, EPHEMERAL_SHARE = 0.3, 0.25, 0.3, 0.25
TEMPLATE_SHARE, SHARED_SHARE, FIRST_AVAILABLE_SHARE = 0.4, 0.5, 0.5
PERCENT_SHARE, EXHAUSTED_SHARE = 0.5, 0.3
#: The name of the budget that covers every existing pod (so every preemption candidate violates it).
EXHAUSTED_BUDGET = "pdb-every-app"

Obj = dict[str, Any]


def add_coverage(scenario: Any, seed: int) -> None:
    """Add this pass's inputs to ``scenario`` (each in its share of the seeds)."""
    rng = random.Random(f"coverage-{seed}")
    rolls = [rng.random() for _ in range(9)]
    if rolls[0] < DECLARED_SHARE:
        _declared_features(rng, scenario)
    if rolls[1] < EPHEMERAL_SHARE:
        _ephemeral_volumes(rng, scenario)
    if scenario.device_classes:
        if rolls[2] < TEMPLATE_SHARE:
            _claim_template(rng, scenario)
        if rolls[3] < SHARED_SHARE:
            _shared_claim(rng, scenario)
        if rolls[4] < FIRST_AVAILABLE_SHARE:
            _first_available(rng, scenario)
    if scenario.budgets:
        if rolls[5] < PERCENT_SHARE:
            _percentages(rng, scenario)
        if rolls[6] < EXHAUSTED_SHARE:
            _exhausted_budget(scenario)
    if rolls[7] < GATED_SHARE:
        _gated(rng, scenario)
    if rolls[8] < NODE_NAME_SHARE:
        _preset_node(rng, scenario)


def _with_feature(pending: Any, *plugins: str) -> None:
    pending.features = tuple(sorted({*pending.features, *plugins}))


def _new_pending(scenario: Any, template: Any, suffix: str, *features: str) -> Any:
    manifest = copy.deepcopy(template.manifest)
    manifest["metadata"]["name"] = f"{template.name}-{suffix}"
    pending = type(template)(len(scenario.pending), manifest, tuple(sorted(features)))
    scenario.pending.append(pending)
    return pending


# -- declared features ------------------------------------------------------------------------------------
def _declared_features(rng: random.Random, scenario: Any) -> None:
    for node in scenario.nodes:
        if rng.random() < 0.5:
            node.setdefault("status", {})["declaredFeatures"] = [DECLARED_FEATURE]
    for pending in rng.sample(scenario.pending, k=min(len(scenario.pending), rng.randint(1, 3))):
        container = pending.manifest["spec"]["containers"][0]
        container["restartPolicy"] = "Never"
        container["restartPolicyRules"] = [
            {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
        ]
        _with_feature(pending, "NodeDeclaredFeatures")


# -- volumes ------------------------------------------------------------------------------------------------
def _ephemeral_volumes(rng: random.Random, scenario: Any) -> None:
    template = {
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    for pending in rng.sample(scenario.pending, k=min(len(scenario.pending), rng.randint(1, 2))):
        spec = pending.manifest["spec"]
        spec.setdefault("volumes", []).append({"name": "scratch", "ephemeral": {"volumeClaimTemplate": template}})
        _with_feature(pending, "VolumeBinding")


# -- devices ------------------------------------------------------------------------------------------------
def _claimless(scenario: Any) -> list[Any]:
    return [p for p in scenario.pending if not p.manifest["spec"].get("resourceClaims")]


def _claim_template(rng: random.Random, scenario: Any) -> None:
    candidates = _claimless(scenario)
    if not candidates:
        return
    pending = rng.choice(candidates)
    spec = pending.manifest["spec"]
    spec["resourceClaims"] = [{"name": "scratch-gpu", "resourceClaimTemplateName": f"{pending.name}-template"}]
    spec["containers"][0].setdefault("resources", {})["claims"] = [{"name": "scratch-gpu"}]
    _with_feature(pending, "DynamicResources")


def _shared_claim(rng: random.Random, scenario: Any) -> None:
    owners = [
        p
        for p in scenario.pending
        if any(c.get("resourceClaimName") for c in p.manifest["spec"].get("resourceClaims") or ())
    ]
    if not owners:
        return
    owner = rng.choice(owners)
    # A pod names claims of its own namespace only (another namespace's claim would be "not found").
    later = [p for p in _claimless(scenario) if p.index > owner.index and p.namespace == owner.namespace]
    if not later:
        return
    sharer = rng.choice(later)
    claim = next(c["resourceClaimName"] for c in owner.manifest["spec"]["resourceClaims"] if c.get("resourceClaimName"))
    spec = sharer.manifest["spec"]
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    spec["containers"][0].setdefault("resources", {})["claims"] = [{"name": "gpu"}]
    _with_feature(sharer, "DynamicResources")


def _first_available(rng: random.Random, scenario: Any) -> None:
    classes = [c["metadata"]["name"] for c in scenario.device_classes if not c["spec"].get("extendedResourceName")]
    for claim in scenario.resource_claims:
        if rng.random() >= 0.5:
            continue
        big, small = classes[-1], classes[0]
        first = [
            {"name": "big", "deviceClassName": big, "count": 2},
            {"name": "one", "deviceClassName": small},
        ]
        claim["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": first}]


# -- budgets ------------------------------------------------------------------------------------------------
def scaled(value: str, total: int) -> int:
    """A percentage of ``total`` rounded up (``intstr.GetScaledValueFromIntOrPercent(..., roundUp=true)``)."""
    return math.ceil(int(value.rstrip("%")) * total / 100)


def _percentages(rng: random.Random, scenario: Any) -> None:
    for budget in scenario.budgets:
        spec = budget["spec"]
        pods = _selected_pods(scenario, budget)
        key = "minAvailable" if "minAvailable" in spec else "maxUnavailable"
        spec[key] = f"{rng.choice((0, 25, 50, 60, 100))}%"
        budget["status"] = _status(spec, pods, budget["status"].get("disruptedPods") or {})


def _status(spec: Obj, pods: list[Obj], disrupted: dict[str, str]) -> Obj:
    """The disruption controller's status for a budget that may use percentages."""
    whole = dict(spec)
    for key in ("minAvailable", "maxUnavailable"):
        if isinstance(whole.get(key), str):
            whole[key] = scaled(whole[key], len(pods))
    return budget_status(whole, pods, disrupted)


def _selected_pods(scenario: Any, budget: Obj) -> list[Obj]:
    namespace = budget["metadata"]["namespace"]
    labels = budget["spec"]["selector"].get("matchLabels") or {}
    keys = [e["key"] for e in budget["spec"]["selector"].get("matchExpressions") or ()]
    return [
        pod
        for pod in scenario.existing_pods
        if pod["metadata"]["namespace"] == namespace
        and labels.items() <= (pod["metadata"].get("labels") or {}).items()
        and all(key in (pod["metadata"].get("labels") or {}) for key in keys)
    ]


def _exhausted_budget(scenario: Any) -> None:
    namespace = scenario.budgets[0]["metadata"]["namespace"]
    spec: Obj = {"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, "minAvailable": "100%"}
    budget: Obj = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": EXHAUSTED_BUDGET, "namespace": namespace},
        "spec": spec,
    }
    budget["status"] = _status(spec, _selected_pods(scenario, budget), {})
    scenario.budgets.append(budget)


def exhausted(scenario: Any) -> bool:
    """Every existing pod is under a budget that allows no disruption."""
    return any(b["metadata"]["name"] == EXHAUSTED_BUDGET for b in scenario.budgets)


# -- gates and nodeName ----------------------------------------------------------------------------------------
def _gated(rng: random.Random, scenario: Any) -> None:
    for index, template in enumerate(rng.sample(scenario.pending, k=min(len(scenario.pending), rng.randint(1, 2)))):
        pending = _new_pending(scenario, template, f"gated{index}", "SchedulingGates")
        pending.manifest["spec"]["schedulingGates"] = [{"name": GATE}]


def _preset_node(rng: random.Random, scenario: Any) -> None:
    """The last pending pod: one naming a node (it may not fit there; no scheduler looks at it)."""
    if not scenario.pending or not scenario.nodes:
        return
    pending = _new_pending(scenario, rng.choice(scenario.pending), "preset", "NodeName")
    spec = pending.manifest["spec"]
    for key in ("schedulingGates", "resourceClaims", "volumes", "affinity", "topologySpreadConstraints"):
        spec.pop(key, None)
    spec["nodeName"] = rng.choice(scenario.nodes)["metadata"]["name"]
    for container in spec["containers"]:
        container.get("resources", {}).pop("claims", None)
        limits = container.get("resources", {}).get("limits") or {}
        for name in [n for n in limits if "/" in n]:
            limits.pop(name)
            container["resources"]["requests"].pop(name, None)
    for resources in (spec["containers"][0].setdefault("resources", {}), spec.get("resources")):
        if resources is not None:  # more CPU than any node has (limits never below requests)
            resources.setdefault("requests", {})["cpu"] = "500"
            if "cpu" in (resources.get("limits") or {}):
                resources["limits"]["cpu"] = "500"


def not_for_a_scheduler(manifest: Obj) -> bool:
    """A pod no scheduler may act on: gated, naming its node already, or waiting in PreEnqueue for a claim
    from a template (DynamicResources' PreEnqueue keeps it out of the active queue until its claim exists)."""
    spec = manifest.get("spec") or {}
    return bool(spec.get("schedulingGates") or spec.get("nodeName") or from_template(manifest))


def from_template(manifest: Obj) -> bool:
    """A pod claim made from a template, which the resourceclaim controller (not running here) would create."""
    claims = (manifest.get("spec") or {}).get("resourceClaims") or ()
    return any(c.get("resourceClaimTemplateName") for c in claims)
