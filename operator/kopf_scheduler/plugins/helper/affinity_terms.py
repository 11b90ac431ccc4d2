"""Pod (anti-)affinity terms parsed once per pod, as upstream's ``framework.AffinityTerm`` (types.go).

InterPodAffinity matches every pod with affinity against every incoming pod, so the terms are parsed once
and parked in :attr:`PodInfo.memo`. A term is frozen and hashable: identical terms of the pods of one
workload compare equal, which lets the plugin decide "does this term match the incoming pod" once per
distinct term per cycle instead of once per pod.

Semantics restated from upstream:

- ``namespaces``: the term's ``namespaces``; if that list is empty *and* ``namespaceSelector`` is nil, the
  owning pod's own namespace.
- ``namespace_selector``: nil → matches nothing; ``{}`` → matches every namespace.
- A pod matches a term if (its namespace is in ``namespaces`` or its namespace's labels match
  ``namespace_selector``) and its labels match ``selector`` (nil ``labelSelector`` → matches nothing).
- ``matchLabelKeys`` / ``mismatchLabelKeys`` are *not* read here: since 1.31 the API server merges them
  into ``labelSelector`` when the pod is created, and the 1.36 scheduler reads only ``labelSelector``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.selectors import NOTHING, LabelSelector

#: Key under which the parsed terms live in ``PodInfo.memo``.
MEMO_KEY = "InterPodAffinity"

#: Namespace labels: the labels of the incoming pod's namespace (empty when the namespace is unknown).
Labels = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """One processed ``PodAffinityTerm``."""

    namespaces: frozenset[str]
    selector: LabelSelector
    topology_key: str
    namespace_selector: LabelSelector

    @classmethod
    def parse(cls, owner_namespace: str, raw: Mapping[str, Any]) -> AffinityTerm:
        names = raw.get("namespaces") or ()
        raw_ns_selector = raw.get("namespaceSelector")
        namespaces = frozenset(names) if names or raw_ns_selector is not None else frozenset((owner_namespace,))
        return cls(
            namespaces=namespaces,
            selector=LabelSelector.parse(raw.get("labelSelector")),
            topology_key=raw.get("topologyKey") or "",
            namespace_selector=LabelSelector.parse(raw_ns_selector),
        )

    @property
    def all_namespaces(self) -> bool:
        """``namespaceSelector: {}``: every namespace qualifies."""
        return self.namespace_selector.is_empty

    def matches(self, pod: PodInfo, namespace_labels: Labels | None) -> bool:
        """Upstream ``AffinityTerm.Matches``; ``namespace_labels`` are the labels of ``pod``'s namespace."""
        if pod.namespace in self.namespaces or self.namespace_selector.matches(namespace_labels or {}):
            return self.selector.matches(pod.labels)
        return False

    def with_namespaces_resolved(self, namespace_labels: Mapping[str, Labels]) -> AffinityTerm:
        """Upstream ``mergeAffinityTermNamespacesIfNotEmpty``, for the incoming pod's terms.

        A non-empty namespace selector is unrolled into ``namespaces`` (the namespaces that exist now and
        match it) and replaced by "nothing"; an empty one (all namespaces) stays. Matching the result no
        longer needs the other pod's namespace labels.
        """
        if self.namespace_selector.is_empty or self.namespace_selector.matches_nothing:
            return self
        selected = {name for name, labels in namespace_labels.items() if self.namespace_selector.matches(labels)}
        return AffinityTerm(self.namespaces | selected, self.selector, self.topology_key, NOTHING)


@dataclass(frozen=True, slots=True)
class WeightedAffinityTerm:
    """One processed ``WeightedPodAffinityTerm``."""

    term: AffinityTerm
    weight: int


@dataclass(frozen=True, slots=True)
class PodAffinityTerms:
    """All pod (anti-)affinity terms of one pod (upstream ``PodInfo.Required*/Preferred*Terms``)."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedAffinityTerm, ...] = ()

    @property
    def has_required(self) -> bool:
        return bool(self.required_affinity or self.required_anti_affinity)

    @property
    def has_preferred(self) -> bool:
        return bool(self.preferred_affinity or self.preferred_anti_affinity)

    def with_namespaces_resolved(self, namespace_labels: Mapping[str, Labels]) -> PodAffinityTerms:
        def resolve(term: AffinityTerm) -> AffinityTerm:
            return term.with_namespaces_resolved(namespace_labels)

        return PodAffinityTerms(
            tuple(resolve(t) for t in self.required_affinity),
            tuple(resolve(t) for t in self.required_anti_affinity),
            tuple(WeightedAffinityTerm(resolve(w.term), w.weight) for w in self.preferred_affinity),
            tuple(WeightedAffinityTerm(resolve(w.term), w.weight) for w in self.preferred_anti_affinity),
        )


NO_TERMS = PodAffinityTerms()


def _required(namespace: str, section: Mapping[str, Any] | None) -> tuple[AffinityTerm, ...]:
    raw = (section or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ()
    return tuple(AffinityTerm.parse(namespace, term) for term in raw)


def _preferred(namespace: str, section: Mapping[str, Any] | None) -> tuple[WeightedAffinityTerm, ...]:
    raw = (section or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    return tuple(
        WeightedAffinityTerm(AffinityTerm.parse(namespace, w.get("podAffinityTerm") or {}), int(w.get("weight") or 0))
        for w in raw
    )


def pod_affinity_terms(pod: PodInfo) -> PodAffinityTerms:
    """The pod's parsed terms, parsed on first use and memoised on the PodInfo."""
    found = pod.memo.get(MEMO_KEY)
    if found is None:
        affinity = pod.affinity
        pod_affinity = affinity.get("podAffinity")
        anti_affinity = affinity.get("podAntiAffinity")
        if not pod_affinity and not anti_affinity:
            found = NO_TERMS
        else:
            ns = pod.namespace
            found = PodAffinityTerms(
                _required(ns, pod_affinity),
                _required(ns, anti_affinity),
                _preferred(ns, pod_affinity),
                _preferred(ns, anti_affinity),
            )
        pod.memo[MEMO_KEY] = found
    return found
