"""VolumeRestrictions: in-tree disk conflicts, ReadWriteOncePod, PreFilter Skip/errors, AddPod/RemovePod, hints."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.framework import QUEUE, QUEUE_SKIP, ActionType, ClusterEvent, Code, CycleState, EventResource
from kopf_scheduler.plugins.helper.volumes import pod_volumes
from kopf_scheduler.plugins.volume_restrictions import (
    ERR_REASON_DISK_CONFLICT,
    ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT,
    VolumeRestrictions,
)
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, pod_info, slots
from tests.unit.plugins._storage import claim_volume, fill, pvc


def gce(name: str, ro: bool = False) -> dict[str, Any]:
    return {"name": "d", "gcePersistentDisk": {"pdName": name, "readOnly": ro}}


def ebs(volume_id: str, ro: bool = False) -> dict[str, Any]:
    return {"name": "d", "awsElasticBlockStore": {"volumeID": volume_id, "readOnly": ro}}


def iscsi(iqn: str, ro: bool = False) -> dict[str, Any]:
    return {"name": "d", "iscsi": {"iqn": iqn, "targetPortal": "p", "lun": 0, "readOnly": ro}}


def rbd(monitors: list[str], pool: str = "p", image: str = "i", ro: bool = False) -> dict[str, Any]:
    return {"name": "d", "rbd": {"monitors": monitors, "pool": pool, "image": image, "readOnly": ro}}


def verdict(existing: dict[str, Any], wanted: dict[str, Any]) -> str:
    cache = make_cache([make_node("n")], [make_pod("old", node_name="n", spec={"volumes": [existing]})])
    snapshot = cache.snapshot()
    plugin = VolumeRestrictions(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec={"volumes": [wanted]}))
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    assert status.is_success
    result = plugin.filter(state, pod, slots(snapshot), snapshot)
    if result is None or not result.rejected[0]:
        return "fits"
    rejection = result.status_at(0)
    assert rejection.code is Code.UNSCHEDULABLE
    return rejection.message


@pytest.mark.parametrize(
    ("existing", "wanted", "expected"),
    [
        (gce("a"), gce("a"), ERR_REASON_DISK_CONFLICT),
        (gce("a", ro=True), gce("a"), ERR_REASON_DISK_CONFLICT),
        (gce("a", ro=True), gce("a", ro=True), "fits"),
        (gce("a"), gce("b"), "fits"),
        (ebs("v1", ro=True), ebs("v1", ro=True), ERR_REASON_DISK_CONFLICT),
        (ebs("v1"), ebs("v2"), "fits"),
        (iscsi("q"), iscsi("q", ro=True), ERR_REASON_DISK_CONFLICT),
        (iscsi("q", ro=True), iscsi("q", ro=True), "fits"),
        (rbd(["m1", "m2"]), rbd(["m2", "m3"]), ERR_REASON_DISK_CONFLICT),
        (rbd(["m1"]), rbd(["m2"]), "fits"),
        (rbd(["m1"]), rbd(["m1"], pool="q"), "fits"),
        (rbd(["m1"], ro=True), rbd(["m1"], ro=True), "fits"),
        (gce("a"), ebs("a"), "fits"),
    ],
)
def test_disk_conflicts(existing: dict[str, Any], wanted: dict[str, Any], expected: str) -> None:
    assert verdict(existing, wanted) == expected


def rwop_cache(*, used_on_node: bool) -> Any:
    pods = [make_pod("holder", node_name="n1" if used_on_node else "unknown", spec={"volumes": [claim_volume("x")]})]
    cache = make_cache([make_node("n1"), make_node("n2")], pods)
    return fill(
        cache, ("PersistentVolumeClaim", pvc("x", modes=["ReadWriteOncePod"])), ("PersistentVolumeClaim", pvc("rwo"))
    )


def test_read_write_once_pod_in_use_rejects_every_node_and_preemption_can_free_it() -> None:
    cache = rwop_cache(used_on_node=True)
    snapshot = cache.snapshot()
    plugin = VolumeRestrictions(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec={"volumes": [claim_volume("x")]}))
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    assert status.is_success
    result = plugin.filter(state, pod, slots(snapshot), snapshot)
    assert result is not None
    assert result.rejected.tolist() == [True, True]
    assert {result.status_at(i).message for i in range(2)} == {ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT}
    assert result.status_at(0).code is Code.UNSCHEDULABLE
    holder = next(iter(cache.node("n1").pods.values()))
    dry_run = state.clone()
    assert plugin.remove_pod(dry_run, pod, holder, cache.node("n1")).is_success
    assert plugin.filter(dry_run, pod, slots(snapshot), snapshot) is None
    assert plugin.add_pod(dry_run, pod, holder, cache.node("n1")).is_success
    assert plugin.filter(dry_run, pod, slots(snapshot), snapshot) is not None
    assert plugin.filter(state, pod, slots(snapshot), snapshot) is not None  # the original is untouched


@pytest.mark.parametrize(
    ("used_on_node", "claims", "code", "message"),
    [
        (False, ["x"], Code.SKIP, ""),  # the holder's node is unknown: not in the snapshot's used set
        (True, ["rwo"], Code.SKIP, ""),
        (True, [], Code.SKIP, ""),
        (True, ["missing"], Code.UNSCHEDULABLE_AND_UNRESOLVABLE, 'persistentvolumeclaim "missing" not found'),
    ],
)
def test_pre_filter(used_on_node: bool, claims: list[str], code: Code, message: str) -> None:
    cache = rwop_cache(used_on_node=used_on_node)
    plugin = VolumeRestrictions(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec={"volumes": [claim_volume(c) for c in claims]}))
    _, status = plugin.pre_filter(CycleState(), pod, cache.snapshot())
    assert (status.code, status.message) == (code, message)


@pytest.mark.parametrize("compact", [False, True])
def test_pre_filter_judges_a_compact_pod_alike_and_decodes_it_only_for_volumes(compact: bool) -> None:
    """A kept pod is compact JSON (PodInfo.compact); asking for its volumes must not decode one that has none."""
    cache = rwop_cache(used_on_node=True)
    plugin = VolumeRestrictions(handle=FakeHandle(cache))
    plain = pod_info(make_pod("plain", labels={"role": "volumes"}))  # the key's name as a value: decoded, still none
    bare = pod_info(make_pod("bare"))
    claiming = pod_info(make_pod("claiming", spec={"volumes": [claim_volume("x")]}))
    for pod in (plain, bare, claiming):
        if compact:
            pod.compact()
    verdicts = [plugin.pre_filter(CycleState(), pod, cache.snapshot())[1].code for pod in (plain, bare, claiming)]
    assert verdicts == [Code.SKIP, Code.SKIP, Code.SUCCESS]
    assert pod_volumes(bare) == ()
    assert pod_volumes(claiming) == [claim_volume("x")]
    assert isinstance(bare.raw, bytes) is compact  # never decoded: its JSON names no volumes
    assert isinstance(plain.raw, dict)
    assert isinstance(claiming.raw, dict)


def test_hints() -> None:
    plugin = VolumeRestrictions(handle=FakeHandle())
    pod = pod_info(make_pod(spec={"volumes": [gce("a"), claim_volume("x")]}))
    deleted = hint_for(plugin, ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE))
    assert deleted(pod, make_pod("o", node_name="n", spec={"volumes": [gce("a")]}), None) is QUEUE
    assert deleted(pod, make_pod("o", node_name="n", spec={"volumes": [claim_volume("x")]}), None) is QUEUE
    assert deleted(pod, make_pod("o", node_name="n", spec={"volumes": [gce("b")]}), None) is QUEUE_SKIP
    assert deleted(pod, make_pod("o", namespace="other", spec={"volumes": [gce("a")]}), None) is QUEUE_SKIP
    added = hint_for(plugin, ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD))
    assert added(pod, None, pvc("x")) is QUEUE
    assert added(pod, None, pvc("y")) is QUEUE_SKIP
    assert added(pod, None, pvc("x", ns="other")) is QUEUE_SKIP
    events = [r.event for r in plugin.events_to_register()]
    assert ClusterEvent(EventResource.NODE, ActionType.ADD) in events
    assert not any(e.matches(ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.UPDATE)) for e in events)
