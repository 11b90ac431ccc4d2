"""PodNominator: upstream's nominator (Noop from the pod's status, Override from PostFilter, Update's rule)."""

from __future__ import annotations

from typing import Any

from kopf_scheduler.framework.interface import Nominator
from kopf_scheduler.queue.nominator import PodNominator
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import make_pod


def pod(name: str, nominated: str = "", **kwargs: Any) -> PodInfo:
    obj = make_pod(name, uid=f"uid-{name}", **kwargs)
    if nominated:
        obj["status"]["nominatedNodeName"] = nominated
    return PodInfo.from_obj(obj)


def names(nominator: PodNominator, node: str) -> list[str]:
    return [p.name for p in nominator.nominated_pods_for_node(node)]


def test_it_is_the_frameworks_nominator_and_truthy_when_empty() -> None:
    nominator: Nominator = PodNominator()
    assert not nominator.nodes_with_nominated_pods()
    assert nominator  # ``nominator or NoNominator()`` must keep it


def test_add_pod_reads_the_status_and_ignores_pods_without_one() -> None:
    nominator = PodNominator()
    nominator.add_pod(pod("a", "n1"))
    nominator.add_pod(pod("b"))
    nominator.add_pod(pod("c", "n1"))
    assert set(nominator.nodes_with_nominated_pods()) == {"n1"}
    assert names(nominator, "n1") == ["a", "c"]
    assert nominator.nominated_node("uid-b") is None
    assert nominator.count == 2


def test_override_moves_the_pod_and_an_empty_name_clears_it() -> None:
    nominator = PodNominator()
    nominator.add_pod(pod("a", "n1"))
    nominator.add_nominated_pod(pod("a", "n1"), "n2")
    assert names(nominator, "n1") == []
    assert "n1" not in nominator.nodes_with_nominated_pods()
    assert names(nominator, "n2") == ["a"]
    nominator.add_nominated_pod(pod("a", "n1"), "")
    assert nominator.count == 0
    assert not nominator.nodes_with_nominated_pods()


def test_a_pod_no_longer_pending_is_not_nominated() -> None:
    pending = {"uid-a": pod("a")}
    nominator = PodNominator(pending.get)
    nominator.add_nominated_pod(pod("a"), "n1")
    nominator.add_nominated_pod(pod("gone"), "n1")
    assert names(nominator, "n1") == ["a"]


def test_update_keeps_a_postfilter_nomination_not_yet_in_the_status() -> None:
    nominator = PodNominator()
    nominator.add_nominated_pod(pod("a"), "n1")
    nominator.update_nominated_pod(pod("a"), pod("a", labels={"x": "y"}))
    assert names(nominator, "n1") == ["a"]
    assert nominator.nominated_pods_for_node("n1")[0].labels == {"x": "y"}  # the new version is held


def test_update_follows_the_status_when_either_version_has_one() -> None:
    nominator = PodNominator()
    nominator.add_nominated_pod(pod("a"), "n1")
    nominator.update_nominated_pod(pod("a"), pod("a", "n2"))
    assert nominator.nominated_node("uid-a") == "n2"
    # The status patch clearing it (old had it, new has none): the nomination goes.
    nominator.update_nominated_pod(pod("a", "n2"), pod("a"))
    assert nominator.nominated_node("uid-a") is None


def test_delete_removes_only_that_pod() -> None:
    nominator = PodNominator()
    nominator.add_pod(pod("a", "n1"))
    nominator.add_pod(pod("b", "n1"))
    nominator.delete_nominated_pod_if_exists(pod("a"))
    nominator.delete_nominated_pod_if_exists(pod("never"))
    assert names(nominator, "n1") == ["b"]
