"""InterPodAffinity (reference §2.11): Filter verdicts, reasons, codes and order; Score and NormalizeScore math."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.args import InterPodAffinityArgs
from kopf_scheduler.framework import QUEUE, QUEUE_SKIP, ActionType, ClusterEvent, EventResource, QueueingHint
from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.status import Code, Status
from kopf_scheduler.plugins.inter_pod_affinity import (
    ERR_REASON_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    InterPodAffinity,
)
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, pod_info, slots

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
UUR = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
U = Code.UNSCHEDULABLE
AFF = (UUR, ERR_REASON_AFFINITY_RULES_NOT_MATCH)
ANTI = (U, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)
EXISTING = (U, ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)
SKIP = "skip"
_UNSET: Any = object()


# -- builders ------------------------------------------------------------------------------------------
def term(
    match: dict[str, str] | None = _UNSET,
    key: str = ZONE,
    *,
    namespaces: list[str] | None = None,
    namespace_selector: dict[str, Any] | None = _UNSET,
    **extra: Any,
) -> dict[str, Any]:
    """A PodAffinityTerm; ``match`` → matchLabels (None → nil labelSelector)."""
    out: dict[str, Any] = {"topologyKey": key, **extra}
    if match is not _UNSET:
        out["labelSelector"] = None if match is None else {"matchLabels": match}
    if namespaces is not None:
        out["namespaces"] = namespaces
    if namespace_selector is not _UNSET:
        out["namespaceSelector"] = namespace_selector
    return out


def weighted(weight: int, pod_term: dict[str, Any]) -> dict[str, Any]:
    return {"weight": weight, "podAffinityTerm": pod_term}


def affinity(
    required: list[dict[str, Any]] = (),  # type: ignore[assignment]
    anti: list[dict[str, Any]] = (),  # type: ignore[assignment]
    preferred: list[dict[str, Any]] = (),  # type: ignore[assignment]
    preferred_anti: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    pod_affinity: dict[str, Any] = {}
    pod_anti: dict[str, Any] = {}
    if required:
        pod_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = list(required)
    if preferred:
        pod_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = list(preferred)
    if anti:
        pod_anti["requiredDuringSchedulingIgnoredDuringExecution"] = list(anti)
    if preferred_anti:
        pod_anti["preferredDuringSchedulingIgnoredDuringExecution"] = list(preferred_anti)
    if pod_affinity:
        spec["podAffinity"] = pod_affinity
    if pod_anti:
        spec["podAntiAffinity"] = pod_anti
    return {"affinity": spec}


def node(name: str, zone: str | None = None, **labels: str) -> dict[str, Any]:
    all_labels = dict(labels)
    if zone is not None:
        all_labels[ZONE] = zone
    return make_node(name, labels=all_labels)


def pod(
    name: str,
    on: str = "",
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return make_pod(name, node_name=on, labels=labels, namespace=namespace, spec=spec)


#: The default cluster: zone a has n1 and n2, zone b has n3, n4 has no zone label.
NODES = [node("n1", "a"), node("n2", "a"), node("n3", "b"), node("n4")]
NAMES = ["n1", "n2", "n3", "n4"]


def build(
    existing: list[dict[str, Any]],
    nodes: list[dict[str, Any]] | None = None,
    namespaces: dict[str, dict[str, str]] | None = None,
) -> ClusterCache:
    cache = make_cache(NODES if nodes is None else nodes, existing)
    for name, labels in (namespaces or {}).items():
        cache.set_namespace_labels(name, labels)
    return cache


def plugin(cache: ClusterCache, **args: Any) -> InterPodAffinity:
    return InterPodAffinity(handle=FakeHandle(cache), args=InterPodAffinityArgs(**args) if args else None)


def verdicts(pl: InterPodAffinity, state: CycleState, incoming: PodInfo, cache: ClusterCache) -> dict[str, Any]:
    snapshot = cache.snapshot()
    names = [n for n in NAMES if cache.node(n) is not None]
    result = pl.filter(state, incoming, slots(snapshot, names), snapshot)
    out: dict[str, Any] = {}
    for position, name in enumerate(names):
        if result is None or not result.rejected[position]:
            out[name] = None
        else:
            status = result.status_at(position)
            assert len(status.reasons) == 1
            out[name] = (status.code, status.reasons[0])
    return out


def run_filter(cache: ClusterCache, incoming: dict[str, Any]) -> Any:
    """PreFilter then Filter on every node: SKIP, or node name → None (pass) / (code, reason)."""
    pl = plugin(cache)
    state = CycleState()
    info = pod_info(incoming)
    result, status = pl.pre_filter(state, info, cache.snapshot())
    assert result is None
    if status.is_skip:
        return SKIP
    assert status.is_success
    return verdicts(pl, state, info, cache)


def passing(*failures: tuple[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(NAMES)
    out.update(dict(failures))
    return out


# -- Filter --------------------------------------------------------------------------------------------
WEB = {"app": "web"}
DB = {"app": "db"}

FILTER_CASES = [
    pytest.param([pod("p", "n1", WEB)], pod("in", labels=WEB), SKIP, id="no-terms-anywhere-skip"),
    pytest.param(
        [pod("p", "n1", WEB, spec=affinity(anti=[term(DB)]))],
        pod("in", labels=WEB),
        SKIP,
        id="existing-anti-affinity-not-matching-skip",
    ),
    pytest.param(
        [pod("p", "n1", WEB, spec=affinity(preferred_anti=[weighted(5, term(WEB))]))],
        pod("in", labels=WEB),
        SKIP,
        id="only-preferred-terms-skip",
    ),
    # Required affinity.
    pytest.param(
        [pod("w", "n1", WEB)],
        pod("in", spec=affinity(required=[term(WEB)])),
        passing(("n3", AFF), ("n4", AFF)),
        id="affinity-zone-domain",
    ),
    pytest.param(
        [pod("w", "n1", WEB)],
        pod("in", spec=affinity(required=[term(WEB, HOST)])),
        passing(("n2", AFF), ("n3", AFF), ("n4", AFF)),
        id="affinity-hostname-domain",
    ),
    pytest.param(
        [],
        pod("in", labels=WEB, spec=affinity(required=[term(WEB)])),
        passing(("n4", AFF)),
        id="first-pod-of-series-passes-where-keys-exist",
    ),
    pytest.param(
        [],
        pod("in", labels=DB, spec=affinity(required=[term(WEB)])),
        passing(("n1", AFF), ("n2", AFF), ("n3", AFF), ("n4", AFF)),
        id="first-pod-exception-needs-self-match",
    ),
    pytest.param(
        [pod("w", "n3", WEB)],
        pod("in", labels=WEB, spec=affinity(required=[term(WEB)])),
        passing(("n1", AFF), ("n2", AFF), ("n4", AFF)),
        id="first-pod-exception-off-once-any-pod-matches",
    ),
    pytest.param(
        [pod("w", "n1", WEB)],
        pod("in", labels=WEB, spec=affinity(required=[term(WEB), term(WEB, "rack")])),
        passing(("n1", AFF), ("n2", AFF), ("n3", AFF), ("n4", AFF)),
        id="affinity-node-must-carry-every-topology-key",
    ),
    pytest.param(
        [pod("w", "n1", WEB), pod("f", "n2", {"tier": "fe"})],
        pod("in", spec=affinity(required=[term(WEB), term({"tier": "fe"})])),
        passing(("n1", AFF), ("n2", AFF), ("n3", AFF), ("n4", AFF)),
        id="affinity-one-pod-must-match-all-terms",
    ),
    pytest.param(
        [pod("w", "n1", WEB), pod("wf", "n3", {"app": "web", "tier": "fe"})],
        pod("in", spec=affinity(required=[term(WEB), term({"tier": "fe"}, HOST)])),
        passing(("n1", AFF), ("n2", AFF), ("n4", AFF)),
        id="affinity-pod-matching-all-terms-counts-in-each-terms-domain",
    ),
    pytest.param(
        [pod("w", "n1", WEB)],
        pod("in", labels=WEB, spec=affinity(required=[term(None)])),
        passing(("n1", AFF), ("n2", AFF), ("n3", AFF), ("n4", AFF)),
        id="affinity-nil-label-selector-matches-nothing",
    ),
    pytest.param(
        [pod("w", "n1", WEB)],
        pod("in", spec=affinity(required=[{"topologyKey": ZONE, "labelSelector": {}}])),
        passing(("n3", AFF), ("n4", AFF)),
        id="affinity-empty-label-selector-matches-every-pod",
    ),
    pytest.param(
        [pod("w", "ghost", WEB)],
        pod("in", spec=affinity(required=[term(WEB)])),
        passing(("n1", AFF), ("n2", AFF), ("n3", AFF), ("n4", AFF)),
        id="pods-on-unknown-nodes-do-not-count",
    ),
    # Required anti-affinity of the incoming pod.
    pytest.param(
        [pod("d", "n1", DB)],
        pod("in", spec=affinity(anti=[term(DB)])),
        passing(("n1", ANTI), ("n2", ANTI)),
        id="anti-affinity-zone-domain-node-without-key-passes",
    ),
    pytest.param(
        [pod("d", "n1", DB)],
        pod("in", spec=affinity(anti=[term(DB, HOST)])),
        passing(("n1", ANTI)),
        id="anti-affinity-hostname",
    ),
    pytest.param(
        [pod("w", "n1", WEB)],
        pod("in", spec=affinity(anti=[term(DB)])),
        passing(),
        id="anti-affinity-nothing-matches",
    ),
    # Existing pods' required anti-affinity (the symmetric check).
    pytest.param(
        [pod("e", "n1", DB, spec=affinity(anti=[term(WEB, HOST)]))],
        pod("in", labels=WEB),
        passing(("n1", EXISTING)),
        id="existing-anti-affinity-hostname",
    ),
    pytest.param(
        [pod("e", "n3", DB, spec=affinity(anti=[term(WEB)]))],
        pod("in", labels=WEB),
        passing(("n3", EXISTING)),
        id="existing-anti-affinity-zone",
    ),
    pytest.param(
        [pod("e", "n4", DB, spec=affinity(anti=[term(WEB)]))],
        pod("in", labels=WEB),
        SKIP,
        id="existing-anti-affinity-key-missing-on-its-node-counts-nothing",
    ),
    pytest.param(
        [pod("e", "n1", DB, spec=affinity(anti=[term(WEB, "rack")]))],
        pod("in", labels=WEB),
        SKIP,
        id="existing-anti-affinity-key-on-no-node",
    ),
    # Which failure is reported: affinity, then anti-affinity, then existing anti-affinity.
    pytest.param(
        [pod("d", "n1", DB), pod("w", "n3", WEB)],
        pod("in", spec=affinity(required=[term(WEB)], anti=[term(DB)])),
        passing(("n1", AFF), ("n2", AFF), ("n4", AFF)),
        id="order-affinity-before-anti-affinity",
    ),
    pytest.param(
        [pod("d", "n1", DB), pod("e", "n2", {"app": "x"}, spec=affinity(anti=[term(WEB)]))],
        pod("in", labels=WEB, spec=affinity(anti=[term(DB, HOST)])),
        passing(("n1", ANTI), ("n2", EXISTING)),
        id="order-anti-affinity-before-existing",
    ),
    pytest.param(
        [pod("w", "n1", WEB), pod("e", "n3", DB, spec=affinity(anti=[term(WEB)]))],
        pod("in", labels=WEB, spec=affinity(required=[term(WEB)])),
        passing(("n3", AFF), ("n4", AFF)),
        id="order-affinity-before-existing",
    ),
    pytest.param(
        [pod("w", "n1", WEB), pod("e", "n1", DB, spec=affinity(anti=[term(WEB, HOST)]))],
        pod("in", labels=WEB, spec=affinity(required=[term(WEB)])),
        passing(("n1", EXISTING), ("n3", AFF), ("n4", AFF)),
        id="affinity-satisfied-but-existing-anti-affinity-rejects",
    ),
]


@pytest.mark.parametrize(("existing", "incoming", "expected"), FILTER_CASES)
def test_filter(existing: list[dict[str, Any]], incoming: dict[str, Any], expected: Any) -> None:
    assert run_filter(build(existing), incoming) == expected


# -- namespaces ----------------------------------------------------------------------------------------
NAMESPACES = {"default": {}, "team-a": {"team": "a"}, "team-b": {"team": "b"}, "other": {}}

NAMESPACE_CASES = [
    pytest.param(
        [pod("d", "n1", DB, namespace="other")],
        pod("in", spec=affinity(anti=[term(DB)])),
        passing(),
        id="default-own-namespace-only",
    ),
    pytest.param(
        [pod("d", "n1", DB, namespace="other")],
        pod("in", spec=affinity(anti=[term(DB, namespaces=["other"])])),
        passing(("n1", ANTI), ("n2", ANTI)),
        id="namespaces-list",
    ),
    pytest.param(
        [pod("d", "n1", DB)],
        pod("in", spec=affinity(anti=[term(DB, namespaces=["other"])])),
        passing(),
        id="namespaces-list-excludes-own",
    ),
    pytest.param(
        [pod("d", "n3", DB, namespace="team-b")],
        pod("in", spec=affinity(anti=[term(DB, namespace_selector={})])),
        passing(("n3", ANTI)),
        id="empty-namespace-selector-selects-all",
    ),
    pytest.param(
        [pod("d", "n3", DB, namespace="nowhere")],
        pod("in", spec=affinity(anti=[term(DB, namespace_selector={})])),
        passing(("n3", ANTI)),
        id="empty-namespace-selector-includes-namespaces-without-object",
    ),
    pytest.param(
        [pod("d", "n1", DB, namespace="team-b")],
        pod("in", spec=affinity(anti=[term(DB, namespace_selector=None)])),
        passing(),
        id="nil-namespace-selector-and-no-namespaces-means-own",
    ),
    pytest.param(
        [pod("d", "n1", DB, namespace="team-a"), pod("d2", "n3", DB, namespace="team-b")],
        pod("in", spec=affinity(anti=[term(DB, namespace_selector={"matchLabels": {"team": "a"}})])),
        passing(("n1", ANTI), ("n2", ANTI)),
        id="namespace-selector-by-labels",
    ),
    pytest.param(
        [pod("d", "n1", DB, namespace="team-a"), pod("d2", "n3", DB, namespace="other"), pod("d3", "n4", DB)],
        pod(
            "in",
            spec=affinity(
                anti=[term(DB, HOST, namespaces=["other"], namespace_selector={"matchLabels": {"team": "a"}})]
            ),
        ),
        passing(("n1", ANTI), ("n3", ANTI)),
        id="namespace-selector-ored-with-namespaces",
    ),
    pytest.param(
        [pod("w", "n1", WEB, namespace="team-a")],
        pod("in", spec=affinity(required=[term(WEB, namespace_selector={"matchLabels": {"team": "a"}})])),
        passing(("n3", AFF), ("n4", AFF)),
        id="affinity-namespace-selector",
    ),
    pytest.param(
        [],
        pod("in", labels=WEB, spec=affinity(required=[term(WEB, namespaces=["other"])])),
        passing(("n1", AFF), ("n2", AFF), ("n3", AFF), ("n4", AFF)),
        id="first-pod-self-match-respects-namespaces",
    ),
    # Existing pods' terms: their namespaceSelector is matched against the incoming pod's namespace labels.
    pytest.param(
        [
            pod(
                "e",
                "n1",
                DB,
                namespace="other",
                spec=affinity(anti=[term(WEB, HOST, namespace_selector={"matchLabels": {"team": "a"}})]),
            )
        ],
        pod("in", labels=WEB, namespace="team-a"),
        passing(("n1", EXISTING)),
        id="existing-anti-affinity-namespace-selector-matches-incoming-namespace",
    ),
    pytest.param(
        [
            pod(
                "e",
                "n1",
                DB,
                namespace="other",
                spec=affinity(anti=[term(WEB, HOST, namespace_selector={"matchLabels": {"team": "a"}})]),
            )
        ],
        pod("in", labels=WEB, namespace="team-b"),
        SKIP,
        id="existing-anti-affinity-namespace-selector-other-namespace",
    ),
    pytest.param(
        [pod("e", "n1", DB, namespace="other", spec=affinity(anti=[term(WEB, HOST)]))],
        pod("in", labels=WEB),
        SKIP,
        id="existing-anti-affinity-defaults-to-its-own-namespace",
    ),
    pytest.param(
        [pod("e", "n1", DB, namespace="other", spec=affinity(anti=[term(WEB, HOST, namespace_selector={})]))],
        pod("in", labels=WEB, namespace="unknown-ns"),
        passing(("n1", EXISTING)),
        id="existing-anti-affinity-all-namespaces",
    ),
]


@pytest.mark.parametrize(("existing", "incoming", "expected"), NAMESPACE_CASES)
def test_filter_namespaces(existing: list[dict[str, Any]], incoming: dict[str, Any], expected: Any) -> None:
    assert run_filter(build(existing, namespaces=NAMESPACES), incoming) == expected


def test_match_label_keys_are_not_read_by_the_scheduler() -> None:
    """The API server merges matchLabelKeys into labelSelector at creation; the scheduler reads only the
    selector, so an unmerged term (as here) behaves as its bare labelSelector."""
    existing = [pod("d", "n1", {"app": "db", "version": "2"})]
    incoming = pod("in", labels={"version": "1"}, spec=affinity(anti=[term(DB, HOST, matchLabelKeys=["version"])]))
    assert run_filter(build(existing), incoming) == passing(("n1", ANTI))


def test_filter_only_the_given_nodes() -> None:
    cache = build([pod("d", "n1", DB)])
    pl, state, info = plugin(cache), CycleState(), pod_info(pod("in", spec=affinity(anti=[term(DB)])))
    pl.pre_filter(state, info, cache.snapshot())
    snapshot = cache.snapshot()
    result = pl.filter(state, info, slots(snapshot, ["n3", "n2"]), snapshot)
    assert result is not None
    assert result.rejected.tolist() == [False, True]
    assert pl.filter(state, info, slots(snapshot, ["n3", "n4"]), snapshot) is None


# -- AddPod / RemovePod --------------------------------------------------------------------------------
def prefiltered(cache: ClusterCache, incoming: dict[str, Any]) -> tuple[InterPodAffinity, CycleState, PodInfo]:
    pl, state, info = plugin(cache), CycleState(), pod_info(incoming)
    _, status = pl.pre_filter(state, info, cache.snapshot())
    assert status.is_success
    return pl, state, info


def test_add_and_remove_pod_update_anti_affinity_counts() -> None:
    cache = build([pod("d", "n1", DB)])
    pl, state, info = prefiltered(cache, pod("in", spec=affinity(anti=[term(DB)])))
    extensions = pl.pre_filter_extensions()
    nominated = pod_info(pod("nominated", "n3", DB))
    assert extensions.add_pod(state, info, nominated, cache.node("n3")).is_success
    assert verdicts(pl, state, info, cache) == passing(("n1", ANTI), ("n2", ANTI), ("n3", ANTI))
    victim = cache.pod(next(p.uid for p in cache.pods() if p.name == "d"))
    assert extensions.remove_pod(state, info, victim, cache.node("n1")).is_success
    assert verdicts(pl, state, info, cache) == passing(("n3", ANTI))


def test_remove_pod_reopens_the_first_pod_exception() -> None:
    cache = build([pod("w", "n3", WEB)])
    pl, state, info = prefiltered(cache, pod("in", labels=WEB, spec=affinity(required=[term(WEB)])))
    assert verdicts(pl, state, info, cache) == passing(("n1", AFF), ("n2", AFF), ("n4", AFF))
    only = next(iter(cache.pods()))
    pl.remove_pod(state, info, only, cache.node("n3"))
    assert verdicts(pl, state, info, cache) == passing(("n4", AFF))
    pl.add_pod(state, info, pod_info(pod("w2", "n1", WEB)), cache.node("n1"))
    assert verdicts(pl, state, info, cache) == passing(("n3", AFF), ("n4", AFF))


def test_add_pod_with_anti_affinity_matching_the_incoming_pod() -> None:
    cache = build([pod("w", "n1", WEB)])
    pl, state, info = prefiltered(cache, pod("in", labels=WEB, spec=affinity(required=[term(WEB)])))
    pl.add_pod(state, info, pod_info(pod("e", "n2", DB, spec=affinity(anti=[term(WEB, HOST)]))), cache.node("n2"))
    assert verdicts(pl, state, info, cache) == passing(("n2", EXISTING), ("n3", AFF), ("n4", AFF))


def test_clone_is_independent() -> None:
    cache = build([pod("d", "n1", DB)])
    pl, state, info = prefiltered(cache, pod("in", spec=affinity(anti=[term(DB)])))
    copy = state.clone()
    pl.add_pod(copy, info, pod_info(pod("x", "n3", DB)), cache.node("n3"))
    assert verdicts(pl, state, info, cache) == passing(("n1", ANTI), ("n2", ANTI))
    assert verdicts(pl, copy, info, cache) == passing(("n1", ANTI), ("n2", ANTI), ("n3", ANTI))


def test_remove_one_of_identical_existing_anti_affinity_pods() -> None:
    """Pods with identical specs are grouped in the cache; counts must still be per pod."""
    spec = affinity(anti=[term(WEB)])
    cache = build([pod("e1", "n1", DB, spec=spec), pod("e2", "n2", DB, spec=spec), pod("e3", "n3", DB, spec=spec)])
    pl, state, info = prefiltered(cache, pod("in", labels=WEB))
    assert verdicts(pl, state, info, cache) == passing(("n1", EXISTING), ("n2", EXISTING), ("n3", EXISTING))
    by_name = {p.name: p for p in cache.pods()}
    pl.remove_pod(state, info, by_name["e1"], cache.node("n1"))
    assert verdicts(pl, state, info, cache) == passing(("n1", EXISTING), ("n2", EXISTING), ("n3", EXISTING))
    pl.remove_pod(state, info, by_name["e2"], cache.node("n2"))
    assert verdicts(pl, state, info, cache) == passing(("n3", EXISTING))


def test_cache_changes_between_cycles() -> None:
    spec = affinity(anti=[term(WEB, HOST)])
    cache = build([pod("e1", "n1", DB, spec=spec), pod("e2", "n3", DB, spec=spec)])
    incoming = pod("in", labels=WEB)
    assert run_filter(cache, incoming) == passing(("n1", EXISTING), ("n3", EXISTING))
    cache.remove_pod(next(p.uid for p in cache.pods() if p.name == "e1"))
    assert run_filter(cache, incoming) == passing(("n3", EXISTING))
    cache.remove_node("n3")
    assert run_filter(cache, incoming) == SKIP
    cache.add_or_update_node(node("n3", "b"))
    assert run_filter(cache, incoming) == passing(("n3", EXISTING))


def test_add_pod_without_pre_filter_state_is_an_error() -> None:
    cache = build([])
    status = plugin(cache).add_pod(CycleState(), pod_info(pod("in")), pod_info(pod("x", "n1")), cache.node("n1"))
    assert status.code is Code.ERROR


# -- Score ---------------------------------------------------------------------------------------------
SCORE_NODES = [node("n1", "a"), node("n2", "a"), node("n3", "b"), node("n4", "c"), node("n5")]
SCORE_NAMES = ["n1", "n2", "n3", "n4", "n5"]


def run_score(existing: list[dict[str, Any]], incoming: dict[str, Any], **args: Any) -> Any:
    """PreScore, Score, NormalizeScore on all nodes: SKIP or (raw scores, normalized scores) by node order."""
    cache = build(existing, nodes=SCORE_NODES, namespaces=NAMESPACES)
    pl, state, info = plugin(cache, **args), CycleState(), pod_info(incoming)
    snapshot = cache.snapshot()
    nodes = slots(snapshot, SCORE_NAMES)
    status = pl.pre_score(state, info, nodes, snapshot)
    if status.is_skip:
        return SKIP
    assert status == Status()
    raw = pl.score(state, info, nodes, snapshot)
    assert raw.dtype == np.int64
    normalized = pl.normalize_score(state, info, nodes, raw.copy())
    return raw.tolist(), normalized.tolist()


SCORE_CASES = [
    pytest.param([pod("w", "n1", WEB)], pod("in"), {}, SKIP, id="no-terms-skip"),
    pytest.param(
        [pod("w", "n1", WEB)],
        pod("in", spec=affinity(preferred=[weighted(5, term(DB))])),
        {},
        SKIP,
        id="nothing-matches-skip",
    ),
    pytest.param(
        [pod("w1", "n1", WEB), pod("w2", "n2", WEB), pod("w3", "n3", WEB)],
        pod("in", spec=affinity(preferred=[weighted(5, term(WEB))])),
        {},
        ([10, 10, 5, 0, 0], [100, 100, 50, 0, 0]),
        id="preferred-affinity-zone",
    ),
    pytest.param(
        [pod("w1", "n1", WEB), pod("w2", "n2", WEB), pod("w3", "n3", WEB)],
        pod("in", spec=affinity(preferred_anti=[weighted(3, term(WEB))])),
        {},
        ([-6, -6, -3, 0, 0], [0, 0, 50, 100, 100]),
        id="preferred-anti-affinity-negative-raw",
    ),
    pytest.param(
        [pod("w1", "n1", WEB), pod("d1", "n3", DB), pod("d2", "n4", DB)],
        pod(
            "in", spec=affinity(preferred=[weighted(2, term(WEB, HOST))], preferred_anti=[weighted(1, term(DB, HOST))])
        ),
        {},
        ([2, 0, -1, -1, 0], [100, 33, 0, 0, 33]),
        id="mixed-signs-truncate",
    ),
    pytest.param(
        [pod("a", "n1", {"app": "a"}), pod("b", "n2", {"app": "b"})],
        pod(
            "in",
            spec=affinity(preferred=[weighted(100, term({"app": "a"}, HOST)), weighted(29, term({"app": "b"}, HOST))]),
        ),
        {},
        ([100, 29, 0, 0, 0], [100, 28, 0, 0, 0]),
        id="float-math-100-times-29-over-100-is-28",
    ),
    pytest.param(
        [pod("w1", "n1", WEB), pod("w2", "n3", WEB), pod("w3", "n4", WEB), pod("w4", "n5", WEB)],
        pod("in", spec=affinity(preferred=[weighted(7, term(WEB, HOST))])),
        {},
        ([7, 0, 7, 7, 7], [100, 0, 100, 100, 100]),
        id="min-is-taken-over-scores",
    ),
    pytest.param(
        [
            pod("d0", "n1", DB),
            pod("d1", "n1", DB),
            pod("d2", "n2", DB),
            pod("d3", "n3", DB),
            pod("d4", "n4", DB),
            pod("d5", "n5", DB),
        ],
        pod("in", spec=affinity(preferred_anti=[weighted(1, term(DB, HOST))])),
        {},
        ([-2, -1, -1, -1, -1], [0, 100, 100, 100, 100]),
        id="all-negative-max-is-taken-over-scores",
    ),
    pytest.param(
        [pod("w1", "n1", WEB), pod("w2", "n2", WEB), pod("w3", "n3", WEB), pod("w4", "n4", WEB), pod("w5", "n5", WEB)],
        pod("in", spec=affinity(preferred=[weighted(7, term(WEB, HOST))])),
        {},
        ([7, 7, 7, 7, 7], [0, 0, 0, 0, 0]),
        id="max-equals-min-all-zero",
    ),
    pytest.param(
        [pod("w1", "n1", WEB), pod("d1", "n1", DB)],
        pod(
            "in", spec=affinity(preferred=[weighted(4, term(WEB, HOST))], preferred_anti=[weighted(4, term(DB, HOST))])
        ),
        {},
        ([0, 0, 0, 0, 0], [0, 0, 0, 0, 0]),
        id="contributions-cancel-not-skipped",
    ),
    pytest.param(
        [pod("w1", "n5", WEB)],
        pod("in", spec=affinity(preferred=[weighted(5, term(WEB))])),
        {},
        SKIP,
        id="matching-pod-on-node-without-key-skip",
    ),
    # Existing pods' terms against the incoming pod.
    pytest.param(
        [pod("e", "n3", spec=affinity(required=[term(WEB)]))],
        pod("in", labels=WEB),
        {},
        ([0, 0, 1, 0, 0], [0, 0, 100, 0, 0]),
        id="existing-required-affinity-hard-weight-default-1",
    ),
    pytest.param(
        [
            pod("e", "n3", spec=affinity(required=[term(WEB)])),
            pod("f", "n1", spec=affinity(preferred=[weighted(5, term(WEB))])),
        ],
        pod("in", labels=WEB),
        {"hard_pod_affinity_weight": 10},
        ([5, 5, 10, 0, 0], [50, 50, 100, 0, 0]),
        id="existing-required-affinity-hard-weight-10",
    ),
    pytest.param(
        [pod("e", "n3", spec=affinity(required=[term(WEB)]))],
        pod("in", labels=WEB),
        {"hard_pod_affinity_weight": 0},
        SKIP,
        id="hard-weight-0-ignores-required-terms",
    ),
    pytest.param(
        [
            pod("e", "n1", spec=affinity(preferred=[weighted(8, term(WEB))])),
            pod("f", "n3", spec=affinity(preferred_anti=[weighted(2, term(WEB))])),
        ],
        pod("in", labels=WEB),
        {},
        ([8, 8, -2, 0, 0], [100, 100, 0, 20, 20]),
        id="existing-preferred-affinity-and-anti-affinity",
    ),
    pytest.param(
        [
            pod("e1", "n1", spec=affinity(preferred=[weighted(3, term(WEB, HOST))])),
            pod("e2", "n1", spec=affinity(preferred=[weighted(3, term(WEB, HOST))])),
            pod("e3", "n2", spec=affinity(preferred=[weighted(3, term(WEB, HOST))])),
            pod("e4", "n3", spec=affinity(preferred_anti=[weighted(3, term(WEB, HOST))])),
        ],
        pod("in", labels=WEB),
        {},
        ([6, 3, -3, 0, 0], [100, 66, 0, 33, 33]),
        id="identical-existing-pods-count-each",
    ),
    pytest.param(
        [pod("e", "n1", spec=affinity(preferred=[weighted(8, term(WEB))]))],
        pod("in", labels=DB),
        {},
        SKIP,
        id="existing-preferred-not-matching-skip",
    ),
    pytest.param(
        [pod("e", "n1", spec=affinity(preferred=[weighted(8, term(WEB))]))],
        pod("in", labels=WEB),
        {"ignore_preferred_terms_of_existing_pods": True},
        SKIP,
        id="ignore-existing-preferred-terms-skip",
    ),
    pytest.param(
        [pod("e", "n1", WEB, spec=affinity(preferred=[weighted(8, term(WEB))]))],
        pod("in", labels=WEB, spec=affinity(preferred=[weighted(1, term(WEB, HOST))])),
        {"ignore_preferred_terms_of_existing_pods": True},
        ([9, 8, 0, 0, 0], [100, 88, 0, 0, 0]),
        id="ignore-flag-inactive-when-incoming-has-preferred-terms",
    ),
    pytest.param(
        [
            pod(
                "e",
                "n1",
                namespace="other",
                spec=affinity(preferred=[weighted(6, term(WEB, namespace_selector={"matchLabels": {"team": "a"}}))]),
            )
        ],
        pod("in", labels=WEB, namespace="team-a"),
        {},
        ([6, 6, 0, 0, 0], [100, 100, 0, 0, 0]),
        id="existing-term-namespace-selector-vs-incoming-namespace",
    ),
    pytest.param(
        [pod("e", "n1", namespace="other", spec=affinity(preferred=[weighted(6, term(WEB))]))],
        pod("in", labels=WEB, namespace="team-a"),
        {},
        SKIP,
        id="existing-term-defaults-to-its-own-namespace",
    ),
    pytest.param(
        [pod("w", "n4", WEB, namespace="team-a"), pod("w2", "n3", WEB, namespace="team-b")],
        pod("in", spec=affinity(preferred=[weighted(5, term(WEB, namespace_selector={"matchLabels": {"team": "a"}}))])),
        {},
        ([0, 0, 0, 5, 0], [0, 0, 0, 100, 0]),
        id="incoming-preferred-namespace-selector",
    ),
]


@pytest.mark.parametrize(("existing", "incoming", "args", "expected"), SCORE_CASES)
def test_score(existing: list[dict[str, Any]], incoming: dict[str, Any], args: dict[str, Any], expected: Any) -> None:
    assert run_score(existing, incoming, **args) == expected


def test_normalize_uses_only_the_scored_nodes() -> None:
    cache = build([pod("w1", "n1", WEB), pod("w2", "n3", WEB)], nodes=SCORE_NODES)
    pl, state, info = (
        plugin(cache),
        CycleState(),
        pod_info(pod("in", spec=affinity(preferred=[weighted(3, term(WEB))]))),
    )
    snapshot = cache.snapshot()
    assert pl.pre_score(state, info, snapshot.order, snapshot).is_success
    nodes = slots(snapshot, ["n1", "n3"])
    raw = pl.score(state, info, nodes, snapshot)
    assert raw.tolist() == [3, 3]
    assert pl.normalize_score(state, info, nodes, raw).tolist() == [0, 0]


# -- randomized cross-check against a literal, per-node, per-pod restatement of upstream ---------------
def _literal_upstream(cache: ClusterCache, incoming: PodInfo, hard_weight: int, ignore_preferred: bool) -> Any:
    """Upstream's loops, restated naively: topology-pair dicts filled pod by pod, node by node."""
    from kopf_scheduler.plugins.helper.affinity_terms import pod_affinity_terms

    all_ns = cache.namespace_labels
    ns_labels = all_ns.get(incoming.namespace) or {}
    terms = pod_affinity_terms(incoming).with_namespaces_resolved(all_ns)
    infos = [cache.node(n) for n in sorted(cache.node_names())]

    def bump(counts: dict[tuple[str, str], int], key: str, labels: dict[str, str], value: int) -> None:
        if key in labels:
            counts[(key, labels[key])] = counts.get((key, labels[key]), 0) + value

    existing: dict[tuple[str, str], int] = {}
    affinity: dict[tuple[str, str], int] = {}
    anti: dict[tuple[str, str], int] = {}
    for info in infos:
        for other in info.pods_with_required_anti_affinity.values():
            for t in pod_affinity_terms(other).required_anti_affinity:
                if t.matches(incoming, ns_labels):
                    bump(existing, t.topology_key, info.labels, 1)
        for other in info.pods.values():
            req = terms.required_affinity
            if req and all(t.matches(other, None) for t in req):
                for t in req:
                    bump(affinity, t.topology_key, info.labels, 1)
            for t in terms.required_anti_affinity:
                if t.matches(other, None):
                    bump(anti, t.topology_key, info.labels, 1)
    filter_out: Any
    if not existing and not terms.required_affinity and not terms.required_anti_affinity:
        filter_out = SKIP
    else:
        filter_out = {}
        for info in infos:
            labels = info.labels
            verdict = None
            exist, has_keys = True, True
            for t in terms.required_affinity:
                if t.topology_key not in labels:
                    has_keys = False
                elif affinity.get((t.topology_key, labels[t.topology_key]), 0) <= 0:
                    exist = False
            if terms.required_affinity and (
                not has_keys
                or (
                    not exist and not (not affinity and all(t.matches(incoming, None) for t in terms.required_affinity))
                )
            ):
                verdict = AFF
            elif anti and any(
                t.topology_key in labels and anti.get((t.topology_key, labels[t.topology_key]), 0) > 0
                for t in terms.required_anti_affinity
            ):
                verdict = ANTI
            elif existing and any(existing.get((k, v), 0) > 0 for k, v in labels.items()):
                verdict = EXISTING
            filter_out[info.name] = verdict

    has_constraints = terms.has_preferred
    score_out: Any
    if ignore_preferred and not has_constraints:
        return filter_out, SKIP
    topo: dict[str, dict[str, int]] = {}
    contributed = False

    def process(t: Any, weight: int, target: PodInfo, labels_for_ns: Any, node_labels: dict[str, str]) -> bool:
        if t.matches(target, labels_for_ns) and t.topology_key in node_labels:
            per_key = topo.setdefault(t.topology_key, {})
            value = node_labels[t.topology_key]
            per_key[value] = per_key.get(value, 0) + weight
            return True
        return False

    for info in infos:
        pods = info.pods if has_constraints else info.pods_with_affinity
        for other in pods.values():
            if not info.labels:
                continue
            for w in terms.preferred_affinity:
                contributed |= process(w.term, w.weight, other, None, info.labels)
            for w in terms.preferred_anti_affinity:
                contributed |= process(w.term, -w.weight, other, None, info.labels)
            other_terms = pod_affinity_terms(other)
            if hard_weight > 0:
                for t in other_terms.required_affinity:
                    contributed |= process(t, hard_weight, incoming, ns_labels, info.labels)
            for w in other_terms.preferred_affinity:
                contributed |= process(w.term, w.weight, incoming, ns_labels, info.labels)
            for w in other_terms.preferred_anti_affinity:
                contributed |= process(w.term, -w.weight, incoming, ns_labels, info.labels)
    if not contributed:
        return filter_out, SKIP
    raw = [sum(values.get(info.labels[k], 0) for k, values in topo.items() if k in info.labels) for info in infos]
    low, high = min(raw), max(raw)
    normalized = [int(100.0 * ((r - low) / (high - low))) if high > low else 0 for r in raw]
    score_out = (raw, normalized)
    return filter_out, score_out


def _random_term(rng: Any) -> dict[str, Any]:
    selector = rng.choice(
        [
            {"matchLabels": {"app": "web"}},
            {"matchLabels": {"app": "db"}},
            {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
            {},
            None,
        ]
    )
    out: dict[str, Any] = {"topologyKey": rng.choice([HOST, ZONE, "rack"]), "labelSelector": selector}
    choice = rng.randrange(4)
    if choice == 1:
        out["namespaces"] = ["team-a"]
    elif choice == 2:
        out["namespaceSelector"] = {}
    elif choice == 3:
        out["namespaceSelector"] = {"matchLabels": {"team": "a"}}
        if rng.random() < 0.5:
            out["namespaces"] = ["team-b"]
    return out


def _random_spec(rng: Any, p: float) -> dict[str, Any] | None:
    if rng.random() > p:
        return None
    lists = [[_random_term(rng) for _ in range(rng.randrange(3) if rng.random() < 0.5 else 0)] for _ in range(2)]
    prefs = [
        [
            weighted(rng.randrange(1, 101), _random_term(rng))
            for _ in range(rng.randrange(3) if rng.random() < 0.5 else 0)
        ]
        for _ in range(2)
    ]
    return affinity(required=lists[0], anti=lists[1], preferred=prefs[0], preferred_anti=prefs[1])


@pytest.mark.parametrize("seed", range(150))
def test_randomized_against_literal_upstream(seed: int) -> None:
    import random

    rng = random.Random(seed)
    nodes = []
    for i in range(rng.randrange(1, 9)):
        labels = {}
        if rng.random() < 0.8:
            labels[ZONE] = rng.choice("ab")
        if rng.random() < 0.5:
            labels["rack"] = rng.choice(["r1", "r2", "r3"])
        nodes.append(make_node(f"n{i}", labels=labels))
    names = [n["metadata"]["name"] for n in nodes] + ["ghost"]
    namespaces = ["default", "team-a", "team-b", "loose"]
    existing = []
    for j in range(rng.randrange(25)):
        labels = {}
        if rng.random() < 0.7:
            labels["app"] = rng.choice(["web", "db"])
        if rng.random() < 0.3:
            labels["tier"] = "fe"
        existing.append(
            make_pod(
                f"p{j}",
                namespace=rng.choice(namespaces),
                node_name=rng.choice(names),
                labels=labels,
                spec=_random_spec(rng, 0.5),
            )
        )
    cache = make_cache(nodes, existing)
    cache.set_namespace_labels("default", {})
    cache.set_namespace_labels("team-a", {"team": "a"})
    cache.set_namespace_labels("team-b", {"team": "b"})
    incoming_labels = {"app": rng.choice(["web", "db"])} if rng.random() < 0.8 else {}
    incoming = pod_info(
        make_pod("in", namespace=rng.choice(namespaces), labels=incoming_labels, spec=_random_spec(rng, 0.9))
    )
    hard_weight = rng.choice([0, 1, 5])
    ignore = rng.random() < 0.3

    pl = InterPodAffinity(
        handle=FakeHandle(cache),
        args=InterPodAffinityArgs(hard_pod_affinity_weight=hard_weight, ignore_preferred_terms_of_existing_pods=ignore),
    )
    snapshot = cache.snapshot()
    order = sorted(cache.node_names())
    node_slots = slots(snapshot, order)
    state = CycleState()
    _, status = pl.pre_filter(state, incoming, snapshot)
    if status.is_skip:
        got_filter: Any = SKIP
    else:
        result = pl.filter(state, incoming, node_slots, snapshot)
        got_filter = {}
        for position, name in enumerate(order):
            if result is None or not result.rejected[position]:
                got_filter[name] = None
            else:
                st = result.status_at(position)
                got_filter[name] = (st.code, st.reasons[0])
    if pl.pre_score(state, incoming, node_slots, snapshot).is_skip:
        got_score: Any = SKIP
    else:
        raw = pl.score(state, incoming, node_slots, snapshot)
        got_score = (raw.tolist(), pl.normalize_score(state, incoming, node_slots, raw).tolist())

    assert (got_filter, got_score) == _literal_upstream(cache, incoming, hard_weight, ignore)

    # RemovePod (preemption dry run) must leave the state as PreFilter on a cache without that pod would.
    placed = [p for p in cache.pods() if cache.node(p.node_name) is not None]
    if got_filter is SKIP or not placed:
        return
    victim = rng.choice(placed)
    assert pl.remove_pod(state, incoming, victim, cache.node(victim.node_name)).is_success
    cache.remove_pod(victim.uid)
    expected, _ = _literal_upstream(cache, incoming, hard_weight, ignore)
    if expected == SKIP:
        expected = dict.fromkeys(order)
    result = pl.filter(state, incoming, node_slots, snapshot)
    after = {
        name: None
        if result is None or not result.rejected[i]
        else (result.status_at(i).code, result.status_at(i).reasons[0])
        for i, name in enumerate(order)
    }
    assert after == expected


# -- EnqueueExtensions: registrations and QueueingHints ----------------------------------------------------------
NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
NODE_LABEL = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL)
POD_DELETE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)
POD_ADD = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD)
POD_LABEL = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.UPDATE_POD_LABEL)


def hint(pod: PodInfo, old: Any, new: Any, *, event: ClusterEvent) -> QueueingHint:
    """Run the hint InterPodAffinity registered for ``event`` (exactly one registration matches)."""
    return hint_for(InterPodAffinity(handle=FakeHandle()), event)(pod, old, new)


def test_events_to_register() -> None:
    assert [r.event for r in InterPodAffinity(handle=FakeHandle()).events_to_register()] == [
        ClusterEvent(EventResource.POD, ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE),
        ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
    ]


def _affinity_pod(kind: str, *, uid: str = "me", labels: dict[str, str] | None = None) -> PodInfo:
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
    return pod_info(
        make_pod(
            "me",
            uid=uid,
            labels=labels or {},
            spec={"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}},
        )
    )


def _db(labels: dict[str, str], *, node_name: str = "n1", uid: str = "db") -> dict[str, Any]:
    return make_pod("db", uid=uid, node_name=node_name, labels=labels)


@pytest.mark.parametrize(
    ("kind", "old", "new", "expected"),
    [
        ("podAffinity", None, _db({"app": "db"}), QUEUE),
        ("podAffinity", None, _db({"app": "web"}), QUEUE_SKIP),
        ("podAffinity", None, _db({"app": "db"}, node_name=""), QUEUE_SKIP),
        ("podAffinity", _db({"app": "web"}), _db({"app": "db"}), QUEUE),
        ("podAffinity", _db({"app": "db"}), None, QUEUE_SKIP),
        ("podAntiAffinity", _db({"app": "db"}), None, QUEUE),
        ("podAntiAffinity", _db({"app": "db"}), _db({"app": "web"}), QUEUE),
        ("podAntiAffinity", None, _db({"app": "db"}), QUEUE_SKIP),
    ],
    ids=[
        "aff-add",
        "aff-add-other",
        "aff-add-unbound",
        "aff-relabel-in",
        "aff-delete",
        "anti-delete",
        "anti-relabel-out",
        "anti-add",
    ],
)
def test_inter_pod_affinity_pod_hint(kind: str, old: Any, new: Any, expected: QueueingHint) -> None:
    event = POD_ADD if old is None else POD_DELETE if new is None else POD_LABEL
    assert hint(_affinity_pod(kind), old, new, event=event) is expected


def test_inter_pod_affinity_deleted_pods_own_anti_affinity() -> None:
    plain = pod_info(make_pod("me", uid="me", labels={"app": "web"}))
    blocker = make_pod(
        "b",
        uid="b",
        node_name="n1",
        spec={
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
                    ]
                }
            }
        },
    )
    assert hint(plain, blocker, None, event=POD_DELETE) is QUEUE
    assert hint(plain, make_pod("x", uid="x", node_name="n1"), None, event=POD_DELETE) is QUEUE_SKIP
    # the pod's own label update always queues
    relabelled = make_pod("me", uid="me", labels={"app": "other"})
    assert (
        hint(plain, plain, relabelled, event=ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE_POD_LABEL))
        is QUEUE
    )


@pytest.mark.parametrize(
    ("kind", "old", "new", "expected"),
    [
        ("podAffinity", None, make_node("n", labels={"zone": "a"}), QUEUE),
        ("podAffinity", None, make_node("n"), QUEUE_SKIP),
        ("podAffinity", make_node("n"), make_node("n", labels={"zone": "a"}), QUEUE),
        ("podAffinity", make_node("n", labels={"zone": "a"}), make_node("n", labels={"zone": "b"}), QUEUE),
        (
            "podAffinity",
            make_node("n", labels={"zone": "a"}),
            make_node("n", labels={"zone": "a", "q": "1"}),
            QUEUE_SKIP,
        ),
        ("podAntiAffinity", None, make_node("n"), QUEUE),
        ("podAntiAffinity", make_node("n", labels={"zone": "a"}), make_node("n"), QUEUE),
        ("podAntiAffinity", make_node("n"), make_node("n", labels={"zone": "a"}), QUEUE_SKIP),
    ],
    ids=[
        "aff-add",
        "aff-add-unkeyed",
        "aff-gains-key",
        "aff-moves",
        "aff-other",
        "anti-add",
        "anti-loses-key",
        "anti-gains-key",
    ],
)
def test_inter_pod_affinity_node_hint(kind: str, old: Any, new: Any, expected: QueueingHint) -> None:
    event = NODE_ADD if old is None else NODE_LABEL
    assert hint(_affinity_pod(kind), old, new, event=event) is expected
