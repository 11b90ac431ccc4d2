"""What a compared pod uses, read from the scenario it came from: the rows of the report's per-feature table.

Why: the per-plugin table says which plugins decided something, but not which *inputs* were ever put in front of
both schedulers (a scheduling gate, ``spec.nodeName``, a claim template, a PodDisruptionBudget...). Each
:class:`Feature` is a predicate on the pending pod's generated manifest and its scenario (never a hand-written
claim), plus the plugins that judge it: a pod is *decisive* for a feature when one of those plugins was
decisive for it (:attr:`tests.conformance.runner.PodResult.decisive`). Upstream's counterpart: the pod API fields
the plugins of ``pkg/scheduler/framework/plugins`` read.

Other scenario kinds (timelines, big clusters) add rows by appending to :data:`FEATURES`; a row that no pod of
a run uses is reported as not exercised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tests.conformance.coverage import exhausted
from tests.conformance.preemptions import PREEMPTION
from tests.conformance.volumes import VOLUME_PLUGINS

Manifest = Mapping[str, Any]


class _Pending(Protocol):
    manifest: dict[str, Any]


class _Scenario(Protocol):
    services: list[dict[str, Any]]
    replica_sets: list[dict[str, Any]]
    budgets: list[dict[str, Any]]
    resource_claims: list[dict[str, Any]]

    @property
    def pending(self) -> Sequence[_Pending]: ...


@dataclass(frozen=True)
class Feature:
    """A row: its name, the plugins that judge it, and whether a pod (manifest, scenario) uses it."""

    name: str
    plugins: tuple[str, ...]
    uses: Callable[[Manifest, _Scenario], bool]


def _spec(pod: Manifest) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def _containers(pod: Manifest) -> list[Mapping[str, Any]]:
    spec = _spec(pod)
    return [*spec.get("initContainers", ()), *spec.get("containers", ())]


def _requests(pod: Manifest) -> set[str]:
    names = {r for c in _containers(pod) for r in ((c.get("resources") or {}).get("requests") or {})}
    return names | set((_spec(pod).get("resources") or {}).get("requests") or {})


def _affinity(pod: Manifest, kind: str) -> Mapping[str, Any]:
    return (_spec(pod).get("affinity") or {}).get(kind) or {}


def _affinity_terms(pod: Manifest) -> list[Mapping[str, Any]]:
    terms: list[Mapping[str, Any]] = []
    for kind in ("podAffinity", "podAntiAffinity"):
        block = _affinity(pod, kind)
        terms += block.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        terms += [w["podAffinityTerm"] for w in block.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    return terms


def _volumes(pod: Manifest, kind: str) -> bool:
    return any(kind in volume for volume in _spec(pod).get("volumes") or ())


def _claims(pod: Manifest, key: str) -> bool:
    return any(claim.get(key) for claim in _spec(pod).get("resourceClaims") or ())


def _spreads(pod: Manifest, when: str) -> bool:
    return any(c.get("whenUnsatisfiable") == when for c in _spec(pod).get("topologySpreadConstraints") or ())


def _selected_by_workload(pod: Manifest, scenario: _Scenario) -> bool:
    """A pod without constraints of its own that a Service or ReplicaSet selects: the system default spread."""
    meta = pod.get("metadata") or {}
    labels, namespace = (meta.get("labels") or {}).items(), meta.get("namespace")
    selectors = [s["spec"].get("selector") or {} for s in scenario.services if s["metadata"]["namespace"] == namespace]
    selectors += [
        r["spec"]["selector"].get("matchLabels") or {}
        for r in scenario.replica_sets
        if r["metadata"]["namespace"] == namespace
    ]
    return any(selector and selector.items() <= labels for selector in selectors)


def _claim_names(pod: Manifest) -> set[str]:
    return {c["resourceClaimName"] for c in _spec(pod).get("resourceClaims") or () if c.get("resourceClaimName")}


def _shared_claim(pod: Manifest, scenario: _Scenario) -> bool:
    """The pod names a ResourceClaim another pending pod of the scenario names too."""
    mine = _claim_names(pod)
    name = (pod.get("metadata") or {}).get("name")
    return any(
        mine & _claim_names(other.manifest) for other in scenario.pending if other.manifest["metadata"]["name"] != name
    )


def _first_available(pod: Manifest, scenario: _Scenario) -> bool:
    mine = _claim_names(pod)
    return any(
        claim["metadata"]["name"] in mine and any("firstAvailable" in r for r in claim["spec"]["devices"]["requests"])
        for claim in scenario.resource_claims
    )


def _restarts_all(pod: Manifest) -> bool:
    """A container rule with the RestartAllContainers action: NodeDeclaredFeatures infers a requirement."""
    return any(
        rule.get("action") == "RestartAllContainers"
        for container in _containers(pod)
        for rule in container.get("restartPolicyRules") or ()
    )


def _budget_percentages(scenario: _Scenario) -> bool:
    return any(
        isinstance(b["spec"].get(key), str) for b in scenario.budgets for key in ("minAvailable", "maxUnavailable")
    )


def _extended(pod: Manifest) -> bool:
    return any("/" in name and not name.startswith("hugepages-") for name in _requests(pod))


FEATURES: list[Feature] = [
    Feature("scheduling gates", ("SchedulingGates",), lambda p, s: bool(_spec(p).get("schedulingGates"))),
    Feature("spec.nodeName", ("NodeName",), lambda p, s: bool(_spec(p).get("nodeName"))),
    Feature("cpu/memory requests", ("NodeResourcesFit",), lambda p, s: bool(_requests(p) & {"cpu", "memory"})),
    Feature("no requests (best effort)", ("NodeResourcesFit",), lambda p, s: not _requests(p)),
    Feature("init containers", ("NodeResourcesFit",), lambda p, s: bool(_spec(p).get("initContainers"))),
    Feature(
        "sidecar containers",
        ("NodeResourcesFit", "NodePorts"),
        lambda p, s: any(c.get("restartPolicy") == "Always" for c in _spec(p).get("initContainers") or ()),
    ),
    Feature("pod-level resources", ("NodeResourcesFit",), lambda p, s: bool(_spec(p).get("resources"))),
    Feature("pod overhead (RuntimeClass)", ("NodeResourcesFit",), lambda p, s: bool(_spec(p).get("runtimeClassName"))),
    Feature("extended resources", ("NodeResourcesFit", "DynamicResources"), lambda p, s: _extended(p)),
    Feature("hugepages", ("NodeResourcesFit",), lambda p, s: any(r.startswith("hugepages-") for r in _requests(p))),
    Feature("nodeSelector", ("NodeAffinity",), lambda p, s: bool(_spec(p).get("nodeSelector"))),
    Feature(
        "required node affinity",
        ("NodeAffinity",),
        lambda p, s: bool(_affinity(p, "nodeAffinity").get("requiredDuringSchedulingIgnoredDuringExecution")),
    ),
    Feature(
        "preferred node affinity",
        ("NodeAffinity",),
        lambda p, s: bool(_affinity(p, "nodeAffinity").get("preferredDuringSchedulingIgnoredDuringExecution")),
    ),
    Feature("tolerations", ("TaintToleration",), lambda p, s: bool(_spec(p).get("tolerations"))),
    Feature("host ports", ("NodePorts",), lambda p, s: any(c.get("ports") for c in _containers(p))),
    Feature("hard spread constraints", ("PodTopologySpread",), lambda p, s: _spreads(p, "DoNotSchedule")),
    Feature("soft spread constraints", ("PodTopologySpread",), lambda p, s: _spreads(p, "ScheduleAnyway")),
    Feature(
        "system default spread (Service/ReplicaSet)",
        ("PodTopologySpread",),
        lambda p, s: not _spec(p).get("topologySpreadConstraints") and _selected_by_workload(p, s),
    ),
    Feature("pod affinity", ("InterPodAffinity",), lambda p, s: bool(_affinity(p, "podAffinity"))),
    Feature("pod anti-affinity", ("InterPodAffinity",), lambda p, s: bool(_affinity(p, "podAntiAffinity"))),
    Feature(
        "affinity across namespaces",
        ("InterPodAffinity",),
        lambda p, s: any("namespaceSelector" in t or "namespaces" in t for t in _affinity_terms(p)),
    ),
    Feature("priority class", ("PrioritySort", PREEMPTION), lambda p, s: bool(_spec(p).get("priorityClassName"))),
    Feature(
        "PodDisruptionBudgets in the cluster",
        (PREEMPTION,),
        lambda p, s: bool(s.budgets) and bool(_spec(p).get("priorityClassName")),
    ),
    Feature("persistent volume claims", VOLUME_PLUGINS, lambda p, s: _volumes(p, "persistentVolumeClaim")),
    Feature("generic ephemeral volumes", VOLUME_PLUGINS, lambda p, s: _volumes(p, "ephemeral")),
    Feature("image volumes", ("ImageLocality",), lambda p, s: _volumes(p, "image")),
    Feature("DRA resource claims", ("DynamicResources",), lambda p, s: _claims(p, "resourceClaimName")),
    Feature("DRA claim templates", ("DynamicResources",), lambda p, s: _claims(p, "resourceClaimTemplateName")),
    Feature("DRA shared claims", ("DynamicResources",), lambda p, s: _shared_claim(p, s)),
    Feature("DRA firstAvailable requests", ("DynamicResources",), lambda p, s: _first_available(p, s)),
    Feature("node declared features", ("NodeDeclaredFeatures",), lambda p, s: _restarts_all(p)),
    Feature(
        "PDBs with percentages",
        (PREEMPTION,),
        lambda p, s: _budget_percentages(s) and bool(_spec(p).get("priorityClassName")),
    ),
    Feature(
        "every preemption candidate violates a PDB",
        (PREEMPTION,),
        lambda p, s: exhausted(s) and bool(_spec(p).get("priorityClassName")),
    ),
]


def pod_uses(pod: Manifest, scenario: _Scenario) -> list[str]:
    """The names of the features ``pod`` (a pending pod's manifest) uses in ``scenario``, in table order."""
    return [feature.name for feature in FEATURES if feature.uses(pod, scenario)]


class _Compared(Protocol):
    uses: list[str]
    decisive: list[str]

    @property
    def agree(self) -> bool: ...


def by_feature(pods: Iterable[_Compared], features: Sequence[Feature] | None = None) -> dict[str, dict[str, int]]:
    """Per feature: pods that use it, of which decisive (one of its plugins decided), agree, disagree."""
    rows = {f.name: {"pods": 0, "decisive": 0, "agree": 0, "disagree": 0} for f in features or FEATURES}
    judges = {f.name: set(f.plugins) for f in features or FEATURES}
    for pod in pods:
        for name in pod.uses:
            row = rows.get(name)
            if row is None:
                continue
            row["pods"] += 1
            row["decisive"] += bool(judges[name] & set(pod.decisive))
            row["agree" if pod.agree else "disagree"] += 1
    return rows
