"""VolumeZone: PreFilter errors and Skip, zone/region matching incl. beta labels and `__` sets, hints (§2.15)."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.framework import QUEUE, QUEUE_SKIP, ActionType, ClusterEvent, Code, CycleState, EventResource
from kopf_scheduler.plugins.volume_zone import ERR_REASON_CONFLICT, VolumeZone
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, pod_info, slots
from tests.unit.plugins._storage import claim_volume, fill, pv, pvc, storage_class

ZONE = "topology.kubernetes.io/zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"

OBJECTS = [
    ("StorageClass", storage_class("wffc")),
    ("StorageClass", storage_class("immediate", mode="Immediate")),
    ("StorageClass", storage_class("nomode", mode=None)),
    ("PersistentVolume", pv("pv-a", labels={ZONE: "a"})),
    ("PersistentVolume", pv("pv-ab", labels={ZONE: "a__b"})),
    ("PersistentVolume", pv("pv-beta", labels={BETA_ZONE: "b"})),
    ("PersistentVolume", pv("pv-region", labels={REGION: "r1", ZONE: "a"})),
    ("PersistentVolume", pv("pv-bad", labels={ZONE: "a__"})),
    ("PersistentVolume", pv("pv-plain")),
    ("PersistentVolumeClaim", pvc("c-a", volume="pv-a")),
    ("PersistentVolumeClaim", pvc("c-ab", volume="pv-ab")),
    ("PersistentVolumeClaim", pvc("c-beta", volume="pv-beta")),
    ("PersistentVolumeClaim", pvc("c-region", volume="pv-region")),
    ("PersistentVolumeClaim", pvc("c-bad", volume="pv-bad")),
    ("PersistentVolumeClaim", pvc("c-plain", volume="pv-plain")),
    ("PersistentVolumeClaim", pvc("c-wffc", sc="wffc")),
    ("PersistentVolumeClaim", pvc("c-imm", sc="immediate")),
    ("PersistentVolumeClaim", pvc("c-nomode", sc="nomode")),
    ("PersistentVolumeClaim", pvc("c-nosc")),
    ("PersistentVolumeClaim", pvc("c-nosuchsc", sc="gone")),
    ("PersistentVolumeClaim", pvc("c-nopv", volume="gone")),
]
NODES = [
    make_node("in-a", labels={ZONE: "a", REGION: "r1"}),
    make_node("in-b", labels={ZONE: "b"}),
    make_node("beta-b", labels={BETA_ZONE: "b"}),
    make_node("bare"),
]


def run(*claims: str) -> tuple[Any, dict[str, bool]]:
    cache = fill(make_cache(NODES), *OBJECTS)
    snapshot = cache.snapshot()
    plugin = VolumeZone(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec={"volumes": [claim_volume(c) for c in claims]}))
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    if not status.is_success:
        return status, {}
    result = plugin.filter(state, pod, slots(snapshot), snapshot)
    names = [snapshot.node_info(int(s)).name for s in slots(snapshot)]
    if result is None:
        return status, dict.fromkeys(names, True)
    for position in range(len(names)):
        if result.rejected[position]:
            rejection = result.status_at(position)
            assert rejection.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            assert rejection.reasons == (ERR_REASON_CONFLICT,)
    return status, {name: not bool(result.rejected[i]) for i, name in enumerate(names)}


@pytest.mark.parametrize(
    ("claims", "fits"),
    [
        (["c-a"], {"in-a": True, "in-b": False, "beta-b": False, "bare": True}),
        (["c-ab"], {"in-a": True, "in-b": True, "beta-b": False, "bare": True}),
        # A beta PV label is matched by the node's beta label, or else by its GA twin.
        (["c-beta"], {"in-a": False, "in-b": True, "beta-b": True, "bare": True}),
        (["c-region"], {"in-a": True, "in-b": False, "beta-b": False, "bare": True}),
        (["c-a", "c-beta"], {"in-a": False, "in-b": False, "beta-b": False, "bare": True}),
    ],
)
def test_filter_verdicts(claims: list[str], fits: dict[str, bool]) -> None:
    status, verdicts = run(*claims)
    assert status.is_success
    assert verdicts == fits


@pytest.mark.parametrize(
    ("claims", "code", "message"),
    [
        ([], Code.SKIP, ""),
        (["c-plain"], Code.SKIP, ""),
        (["c-bad"], Code.SKIP, ""),  # an unparsable label value is ignored
        (["c-wffc"], Code.SKIP, ""),
        ([""], Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "PersistentVolumeClaim had no name"),
        (["missing"], Code.UNSCHEDULABLE_AND_UNRESOLVABLE, 'persistentvolumeclaim "missing" not found'),
        (["c-nopv"], Code.UNSCHEDULABLE_AND_UNRESOLVABLE, 'persistentvolume "gone" not found'),
        (["c-nosc"], Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "PersistentVolumeClaim had no pv name and storageClass name"),
        (["c-nosuchsc"], Code.UNSCHEDULABLE_AND_UNRESOLVABLE, 'storageclass.storage.k8s.io "gone" not found'),
        (["c-nomode"], Code.UNSCHEDULABLE_AND_UNRESOLVABLE, 'VolumeBindingMode not set for StorageClass "nomode"'),
        (["c-imm"], Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "PersistentVolume had no name"),
    ],
)
def test_pre_filter_statuses(claims: list[str], code: Code, message: str) -> None:
    status, _ = run(*claims)
    assert status.code is code
    assert status.message == message


def test_hints() -> None:
    plugin = VolumeZone(handle=FakeHandle())
    pod = pod_info(make_pod(spec={"volumes": [claim_volume("c-a")]}))
    sc_add = hint_for(plugin, ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD))
    assert sc_add(pod, None, storage_class("s")) is QUEUE
    assert sc_add(pod, None, storage_class("s", mode="Immediate")) is QUEUE_SKIP
    pvc_update = hint_for(plugin, ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.UPDATE))
    assert pvc_update(pod, pvc("c-a"), pvc("c-a", volume="x")) is QUEUE
    assert pvc_update(pod, None, pvc("other")) is QUEUE_SKIP
    assert pvc_update(pod, None, pvc("c-a", ns="elsewhere")) is QUEUE_SKIP
    pv_update = hint_for(plugin, ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.UPDATE))
    assert pv_update(pod, None, pv("p")) is QUEUE
    assert pv_update(pod, pv("p", labels={ZONE: "a"}), pv("p", labels={ZONE: "b"})) is QUEUE
    assert pv_update(pod, pv("p", labels={ZONE: "a"}), pv("p", labels={ZONE: "a", "x": "y"})) is QUEUE_SKIP
    registered = {r.event for r in plugin.events_to_register()}
    assert ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL) in registered
    assert not any(
        r.event.matches(ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT))
        for r in plugin.events_to_register()
    )
