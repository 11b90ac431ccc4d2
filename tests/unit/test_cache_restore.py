"""ClusterCache.restore_pod: a pod taken off for a dry run comes back as the same object, assumed mark kept."""

from __future__ import annotations

import pytest

from kopf_scheduler.state.cache import ClusterCache
from tests.unit.factories import make_cache, make_node, make_pod, pod_info


def _cache() -> ClusterCache:
    return make_cache(
        [make_node("n1", cpu="4")], [make_pod("bound", uid="u-bound", requests={"cpu": "1"}, node_name="n1")]
    )


def test_a_removed_pod_comes_back_as_the_same_object_with_its_accounting() -> None:
    cache = _cache()
    pod = cache.pod("u-bound")
    assert pod is not None
    requested = int(cache.table.pod_count.sum())
    cache.remove_pod(pod.uid)
    assert cache.pod(pod.uid) is None
    cache.restore_pod(pod, assumed=False)
    assert cache.pod(pod.uid) is pod
    assert int(cache.table.pod_count.sum()) == requested
    assert not cache.is_assumed(pod.uid)


def test_an_assumed_pod_stays_assumed_and_a_present_one_is_refused() -> None:
    cache = _cache()
    assumed = cache.assume(pod_info(make_pod("pending", requests={"cpu": "1"})), "n1")
    cache.remove_pod(assumed.uid)
    cache.restore_pod(assumed, assumed=True)
    assert cache.is_assumed(assumed.uid)
    with pytest.raises(ValueError, match="already in the cache"):
        cache.restore_pod(assumed, assumed=True)
