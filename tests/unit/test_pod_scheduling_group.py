"""PodInfo.scheduling_group: a pod's ``spec.schedulingGroup.podGroupName`` (core/v1 PodSchedulingGroup) and the
key upstream keeps its pod group's state by; read without decoding a compact pod."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.state.cache import ClusterCache
from tests.unit.factories import make_pod, pod_info


def _member(name: str = "p", *, group: str = "pg", namespace: str = "ns", **kwargs: Any) -> dict[str, Any]:
    return make_pod(name, namespace=namespace, spec={"schedulingGroup": {"podGroupName": group}}, **kwargs)


def test_a_pod_without_a_scheduling_group_has_none() -> None:
    pod = pod_info(make_pod("plain"))
    assert pod.scheduling_group is None
    assert pod.scheduling_group_key is None


def test_a_member_names_its_group_and_is_keyed_by_namespace_and_group() -> None:
    pod = pod_info(_member(group="gang-a", namespace="team"))
    assert pod.scheduling_group == "gang-a"
    assert pod.scheduling_group_key == ("team", "gang-a")


@pytest.mark.parametrize("group", [{}, None, {"podGroupName": None}, "not-an-object"])
def test_a_scheduling_group_without_a_pod_group_name_counts_as_none(group: Any) -> None:
    assert pod_info(make_pod("odd", spec={"schedulingGroup": group})).scheduling_group is None


def test_the_group_is_read_without_decoding_a_compact_pod() -> None:
    for obj in (make_pod("plain"), _member("member")):
        pod = pod_info(obj)
        pod.compact()
        assert isinstance(pod.raw, bytes)
        expected = None if pod.name == "plain" else "pg"
        assert pod.scheduling_group == expected
        assert isinstance(pod.raw, bytes), "reading the group decoded the pod"


def test_the_group_survives_the_copies_the_cache_makes() -> None:
    cache = ClusterCache()
    pending = pod_info(_member(uid="u1"))
    assumed = ClusterCache.placed_copy(pending, "n1")
    assert assumed.scheduling_group_key == ("ns", "pg")
    newer = pending.with_obj(_member(uid="u1", labels={"a": "b"}))
    assert newer.scheduling_group_key == ("ns", "pg")
    assert cache.add_or_update_pod(_member(uid="u2", node_name="n1")) is not None
    bound = cache.pod("u2")
    assert bound is not None
    assert bound.scheduling_group == "pg"
