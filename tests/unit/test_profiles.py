"""ProfileHandle (profiles.py): what the framework Handle tells plugins about the pods the watches know."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kopf_scheduler.profiles import ProfileHandle
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import make_cache, make_node, make_pod, pod_info

POD = pod_info(make_pod("web-0", uid="uid-1"))
#: The same namespace and name under another uid (deleted and re-created).
RECREATED = pod_info(make_pod("web-0", uid="uid-2"))
ELSEWHERE = pod_info(make_pod("web-0", namespace="other", uid="uid-3"))


def pending(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    pods[POD.uid] = POD


def assumed(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    cache.assume(POD, "n1")


def bound(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    cache.add_or_update_pod(make_pod("web-0", uid="uid-1", node_name="n1"))


def recreated_pending(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    pods[RECREATED.uid] = RECREATED


def recreated_bound(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    cache.add_or_update_pod(make_pod("web-0", uid="uid-2", node_name="n1"))


def other_namespace(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    pods[ELSEWHERE.uid] = ELSEWHERE
    cache.add_or_update_pod(make_pod("web-0", namespace="other", uid="uid-4", node_name="n1"))


def deleted(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    pods[POD.uid] = POD
    cache.assume(POD, "n1")
    del pods[POD.uid]  # the DELETED watch event drops it from both
    cache.remove_pod(POD.uid)


@pytest.mark.parametrize(
    ("known", "exists"),
    [
        (pending, True),
        (assumed, True),
        (bound, True),
        (recreated_pending, True),  # upstream's lister looks pods up by namespace and name
        (recreated_bound, True),
        (other_namespace, False),
        (deleted, False),
    ],
)
def test_pod_exists(known: Callable[[dict[str, PodInfo], ClusterCache], None], exists: bool) -> None:
    cache = make_cache([make_node("n1")])
    unassigned: dict[str, PodInfo] = {}
    handle = ProfileHandle("default-scheduler", client=lambda: None, cache=cache, unassigned=unassigned)
    known(unassigned, cache)
    assert handle.pod_exists(POD) is exists
