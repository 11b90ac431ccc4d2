"""ClusterCache.matching_pod_counts: the incremental per-node counts equal a recount after any event sequence."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.selector_counts import SelectorPodCounts
from kopf_scheduler.state.selectors import LabelSelector
from tests.unit.factories import make_cache, make_node, make_pod

WEB = LabelSelector.parse({"matchLabels": {"app": "web"}})
NOT_DB = LabelSelector.parse({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]})


def recount(cache: ClusterCache, namespace: str, selector: LabelSelector) -> np.ndarray:
    counts = np.zeros(cache.table.capacity, dtype=np.int64)
    for pod in cache.matching_pods(namespace, selector):
        info = cache.node(pod.node_name)
        if info is not None and not pod.terminating:
            counts[info.slot] += 1
    return counts


def test_counts_follow_pod_events() -> None:
    cache = make_cache([make_node("a"), make_node("b")])
    web = make_pod("w1", node_name="a", labels={"app": "web"})
    cache.add_or_update_pod(web)
    first = cache.matching_pod_counts("default", WEB)
    assert first[cache.node("a").slot] == 1
    assert not first.flags.writeable
    cache.add_or_update_pod(make_pod("w2", node_name="b", labels={"app": "web"}))
    cache.add_or_update_pod(make_pod("o", node_name="b", labels={"app": "web"}, namespace="other"))
    cache.add_or_update_pod(make_pod("d", node_name="b", labels={"app": "db"}))
    counts = cache.matching_pod_counts("default", WEB)
    assert (counts[cache.node("a").slot], counts[cache.node("b").slot]) == (1, 1)
    # Label change and deletion timestamp: the old version leaves, the new one is not counted.
    web["metadata"]["labels"] = {"app": "db"}
    cache.add_or_update_pod(web)
    assert cache.matching_pod_counts("default", WEB)[cache.node("a").slot] == 0
    web["metadata"]["labels"] = {"app": "web"}
    web["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cache.add_or_update_pod(web)
    assert cache.matching_pod_counts("default", WEB)[cache.node("a").slot] == 0


def test_node_removal_and_return() -> None:
    cache = make_cache([make_node("a"), make_node("b")], [make_pod("w", node_name="a", labels={"app": "web"})])
    slot = cache.node("a").slot
    assert cache.matching_pod_counts("default", WEB)[slot] == 1
    cache.remove_node("a")
    assert cache.matching_pod_counts("default", WEB).sum() == 0
    cache.add_or_update_node(make_node("a"))
    assert cache.matching_pod_counts("default", WEB)[cache.node("a").slot] == 1


def test_lru_drops_least_recently_used() -> None:
    index = SelectorPodCounts(limit=2)
    cache = make_cache([make_node("a")], [make_pod("w", node_name="a", labels={"app": "web", "x": "1"})])
    selectors = [LabelSelector.parse({"matchLabels": {"x": str(i)}}) for i in range(3)]
    for selector in selectors:
        index.get(cache, "default", selector)
    assert len(index._tracked) == 2
    assert ("default", selectors[0]) not in index._tracked


@pytest.mark.parametrize("new_objects", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_events_match_recount(seed: int, new_objects: bool) -> None:
    """With ``new_objects`` a relabelled pod arrives as a new object, as from a watch (the cache then keeps its
    parse and only re-indexes its labels); otherwise the same object is changed in place (parsed again)."""
    rng = random.Random(seed)
    cache = ClusterCache()
    for i in range(3):
        cache.add_or_update_node(make_node(f"n{i}"))
    cache.matching_pod_counts("default", WEB)
    cache.matching_pod_counts("default", NOT_DB)
    live: dict[str, dict] = {}
    for step in range(400):
        action = rng.random()
        if action < 0.45:
            name = f"p{step}"
            obj = make_pod(
                name,
                node_name=f"n{rng.randrange(8)}",  # nodes n3..n7 do not exist yet: orphans
                labels={"app": rng.choice(["web", "db", "api"])},
                namespace=rng.choice(["default", "default", "other"]),
            )
            live[name] = obj
            cache.add_or_update_pod(obj)
        elif action < 0.65 and live:
            name = rng.choice(sorted(live))
            cache.remove_pod(live.pop(name)["metadata"]["uid"])
        elif action < 0.8 and live:
            name = rng.choice(sorted(live))
            obj = live[name] = copy.deepcopy(live[name]) if new_objects else live[name]
            obj["metadata"]["labels"] = {"app": rng.choice(["web", "db"])}
            if rng.random() < 0.3:
                obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            cache.add_or_update_pod(obj)
        elif action < 0.9:
            cache.add_or_update_node(make_node(f"n{rng.randrange(8)}"))
        else:
            cache.remove_node(f"n{rng.randrange(8)}")
        for selector in (WEB, NOT_DB):
            for namespace in ("default", "other"):
                got = cache.matching_pod_counts(namespace, selector)
                assert np.array_equal(got, recount(cache, namespace, selector)), (step, namespace, selector)
                matching = {pod.name for pod in cache.matching_pods(namespace, selector)}
                assert matching == {
                    name
                    for name, obj in live.items()
                    if obj["metadata"].get("namespace", "default") == namespace
                    and selector.matches(obj["metadata"]["labels"])
                }, (step, namespace, selector)


def test_table_growth_pads_tracked_counts() -> None:
    cache = make_cache([make_node("n0")])
    assert len(cache.matching_pod_counts("default", WEB)) == cache.table.capacity
    for i in range(1, 100):
        cache.add_or_update_node(make_node(f"n{i}"))
    cache.add_or_update_pod(make_pod("w", node_name="n99", labels={"app": "web"}))
    counts = cache.matching_pod_counts("default", WEB)
    assert len(counts) == cache.table.capacity >= 100
    assert counts[cache.node("n99").slot] == 1
    assert counts.sum() == 1


def test_terminating_pods_counted_only_when_asked() -> None:
    """PodTopologySpread skips terminating pods; InterPodAffinity counts them (upstream does both)."""
    cache = make_cache([make_node("a")])
    slot = cache.node("a").slot
    live = make_pod("live", node_name="a", labels={"app": "web"})
    leaving = make_pod("leaving", node_name="a", labels={"app": "web"})
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cache.add_or_update_pod(live)
    assert cache.matching_pod_counts("default", WEB)[slot] == 1
    assert cache.matching_pod_counts("default", WEB, include_terminating=True)[slot] == 1
    cache.add_or_update_pod(leaving)  # kept current after both arrays exist
    assert cache.matching_pod_counts("default", WEB)[slot] == 1
    assert cache.matching_pod_counts("default", WEB, include_terminating=True)[slot] == 2
    cache.remove_pod(leaving["metadata"]["uid"])
    assert cache.matching_pod_counts("default", WEB, include_terminating=True)[slot] == 1
