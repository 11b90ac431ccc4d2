"""VolumeBinding (reference §2.14; upstream plugins/volumebinding v1.36): verdicts, messages, the matching
rules, the assume cache, PreBind against a fake API client, QueueingHints."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from kopf_scheduler.algorithm import schedule_pod
from kopf_scheduler.api.args import VolumeBindingArgs
from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework import SUCCESS, APIError, Code, CycleState, EventResource, Status
from kopf_scheduler.framework import ExtensionPoint as E
from kopf_scheduler.framework.builder import resolve_profile
from kopf_scheduler.framework.events import QUEUE, QUEUE_SKIP, ActionType, ClusterEvent
from kopf_scheduler.plugins.registry import in_tree_registry
from kopf_scheduler.plugins.volume_binding import (
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_NOT_ENOUGH_SPACE,
    ERR_REASON_PV_NOT_EXIST,
    ERR_UNBOUND_IMMEDIATE,
    STATE_KEY,
    VolumeBinding,
)
from kopf_scheduler.plugins.volume_binding.assume_cache import AssumeCacheError
from kopf_scheduler.schedule_one import assume_and_reserve, bind_pod
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.objects import (
    CSI_DRIVER,
    CSI_NODE,
    CSI_STORAGE_CAPACITY,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
)
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, pod_info
from tests.unit.test_runtime import build

WFFC = "WaitForFirstConsumer"
NODES = ("n1", "n2", "n3")


# -- builders ------------------------------------------------------------------------------------------------
def storage_class(
    name: str, *, mode: str | None = WFFC, provisioner: str = "kubernetes.io/no-provisioner", topologies: Any = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name}, "provisioner": provisioner}
    if mode is not None:
        obj["volumeBindingMode"] = mode
    if topologies is not None:
        obj["allowedTopologies"] = topologies
    return obj


def pv(
    name: str,
    *,
    cls: str = "local",
    size: str = "10Gi",
    node: str | None = "n1",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    phase: str = "Available",
    claim: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    rv: str = "10",
    volume_mode: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"storageClassName": cls, "capacity": {"storage": size}, "accessModes": list(modes)}
    if node is not None:
        term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    if claim is not None:
        spec["claimRef"] = claim
    if volume_mode is not None:
        spec["volumeMode"] = volume_mode
    meta = {"name": name, "resourceVersion": rv, "labels": labels or {}}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def pvc(
    name: str = "data",
    *,
    cls: str | None = "local",
    size: str | None = "5Gi",
    volume: str = "",
    bound: bool = False,
    annotations: dict[str, str] | None = None,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    selector: dict[str, Any] | None = None,
    deleting: bool = False,
    phase: str = "Pending",
    owner: str | None = None,
    rv: str = "20",
    volume_mode: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": rv}
    notes = dict(annotations or {})
    if bound:
        notes["pv.kubernetes.io/bind-completed"] = "yes"
    meta["annotations"] = notes
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner is not None:
        meta["ownerReferences"] = [{"kind": "Pod", "name": "web-0", "uid": owner, "controller": True}]
    spec: dict[str, Any] = {"accessModes": list(modes)}
    if cls is not None:
        spec["storageClassName"] = cls
    if size is not None:
        spec["resources"] = {"requests": {"storage": size}}
    if volume:
        spec["volumeName"] = volume
    if selector is not None:
        spec["selector"] = selector
    if volume_mode is not None:
        spec["volumeMode"] = volume_mode
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def claim_volume(claim: str = "data", name: str = "vol") -> dict[str, Any]:
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def ephemeral_volume(name: str = "scratch") -> dict[str, Any]:
    return {"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}


def a_pod(*volumes: dict[str, Any], name: str = "web-0", uid: str = "uid-web-0") -> Any:
    return pod_info(make_pod(name, uid=uid, spec={"volumes": list(volumes)}))


def cluster(*objects: tuple[str, dict[str, Any]]) -> ClusterCache:
    cache = make_cache([make_node(n, labels={"zone": "z1" if n != "n3" else "z2"}) for n in NODES])
    for kind, obj in objects:
        cache.objects.apply(kind, "ADDED", obj)
    return cache


def sc(obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return STORAGE_CLASS, obj


def V(obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return PERSISTENT_VOLUME, obj


def C(obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return PERSISTENT_VOLUME_CLAIM, obj


LOCAL = sc(storage_class("local"))


def plugin_for(cache: ClusterCache, **args: Any) -> VolumeBinding:
    return VolumeBinding(handle=FakeHandle(cache), args=VolumeBindingArgs(**args))


def cycle(plugin: VolumeBinding, cache: ClusterCache, pod: Any) -> tuple[CycleState, Any, Status, dict[str, Status]]:
    """PreFilter, then Filter on every node (unless PreFilter did not succeed)."""
    state = CycleState()
    snapshot = cache.snapshot()
    result, status = plugin.pre_filter(state, pod, snapshot)
    verdicts: dict[str, Status] = {}
    if status.is_success:
        for info in snapshot.node_infos():
            verdicts[info.name] = plugin.filter_node(state, pod, info)
        # The vectorised Filter (node affinity judged over the node table) agrees with the scalar one.
        outcome = plugin.filter(state, pod, snapshot.order, snapshot)
        vectorised = {
            info.name: outcome.status_at(i) if outcome is not None and outcome.rejected[i] else SUCCESS
            for i, info in enumerate(snapshot.node_infos())
        }
        assert vectorised == verdicts
    return state, result, status, verdicts


def rejections(verdicts: dict[str, Status]) -> dict[str, tuple[str, ...]]:
    return {node: status.reasons for node, status in verdicts.items() if not status.is_success}


# -- PreFilter ------------------------------------------------------------------------------------------------
def uur(text: str) -> tuple[Code, tuple[str, ...]]:
    return Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (text,)


@pytest.mark.parametrize(
    ("volumes", "objects", "expected"),
    [
        pytest.param([], [], (Code.SKIP, ()), id="no-volumes"),
        pytest.param([{"name": "tmp", "emptyDir": {}}], [], (Code.SKIP, ()), id="no-claims"),
        pytest.param([claim_volume()], [], uur('persistentvolumeclaim "data" not found'), id="missing"),
        pytest.param(
            [ephemeral_volume()],
            [],
            uur('waiting for ephemeral volume controller to create the persistentvolumeclaim "web-0-scratch"'),
            id="ephemeral-missing",
        ),
        pytest.param(
            [claim_volume()],
            [C(pvc(volume="gone", phase="Lost"))],
            uur('persistentvolumeclaim "data" bound to non-existent persistentvolume "gone"'),
            id="lost",
        ),
        pytest.param(
            [claim_volume()],
            [C(pvc(deleting=True))],
            uur('persistentvolumeclaim "data" is being deleted'),
            id="deleting",
        ),
        pytest.param(
            [ephemeral_volume()],
            [C(pvc("web-0-scratch", owner="someone-else"))],
            uur("PVC default/web-0-scratch was not created for pod default/web-0 (pod is not owner)"),
            id="ephemeral-not-owned",
        ),
        pytest.param(
            [claim_volume()],
            [sc(storage_class("fast", mode="Immediate")), C(pvc(cls="fast"))],
            uur(ERR_UNBOUND_IMMEDIATE),
            id="unbound-immediate",
        ),
        pytest.param([claim_volume()], [C(pvc(cls=None))], uur(ERR_UNBOUND_IMMEDIATE), id="no-class-is-immediate"),
        pytest.param([claim_volume()], [C(pvc(cls="absent"))], uur(ERR_UNBOUND_IMMEDIATE), id="unknown-class"),
        pytest.param(
            [claim_volume()], [LOCAL, C(pvc(volume="pv1"))], uur(ERR_UNBOUND_IMMEDIATE), id="prebound-by-name"
        ),
        pytest.param(
            [claim_volume()],
            [sc(storage_class("local", mode=None)), C(pvc())],
            (Code.ERROR, ('VolumeBindingMode not set for StorageClass "local"',)),
            id="class-without-mode",
        ),
        pytest.param([claim_volume()], [LOCAL, C(pvc())], (Code.SUCCESS, ()), id="wffc-unbound"),
        pytest.param(
            [ephemeral_volume()],
            [LOCAL, C(pvc("web-0-scratch", owner="uid-web-0"))],
            (Code.SUCCESS, ()),
            id="ephemeral",
        ),
    ],
)
def test_pre_filter(volumes: list[dict[str, Any]], objects: list[Any], expected: tuple[Code, tuple[str, ...]]) -> None:
    cache = cluster(*objects)
    _, result, status, _ = cycle(plugin_for(cache), cache, a_pod(*volumes))
    assert (status.code, status.reasons) == expected
    assert result is None


def test_bound_local_volumes_are_judged_per_node_not_by_a_pre_filter_result() -> None:
    # 1.36 has no GetEligibleNodes (it narrowed nodes by local PVs' hostname terms in some releases).
    objects = [
        V(pv("pv1", node="n2", phase="Bound")),
        V(pv("pv2", node=None, phase="Bound")),
        C(pvc("a", volume="pv1", bound=True)),
        C(pvc("b", volume="pv2", bound=True)),
    ]
    cache = cluster(*objects)
    _, result, status, verdicts = cycle(
        plugin_for(cache), cache, a_pod(claim_volume("a", "va"), claim_volume("b", "vb"))
    )
    assert status.is_success
    assert result is None
    assert rejections(verdicts) == {"n1": (ERR_REASON_NODE_CONFLICT,), "n3": (ERR_REASON_NODE_CONFLICT,)}


def test_a_pod_without_claims_costs_a_skip_and_reserve_prebind_do_nothing() -> None:
    cache = cluster()
    plugin = plugin_for(cache)
    state, _, status, _ = cycle(plugin, cache, a_pod())
    assert status.is_skip
    assert plugin.reserve(state, a_pod(), "n1").is_success
    assert plugin.pre_bind_pre_flight(state, a_pod(), "n1").is_skip
    assert asyncio.run(plugin.pre_bind(state, a_pod(), "n1")).is_success


# -- Filter ---------------------------------------------------------------------------------------------------
def by_name_field(name: str, node: str) -> dict[str, Any]:
    volume = pv(name, node=None, phase="Bound")
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    volume["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    return volume


def bound_claim_cases() -> list[Any]:
    return [
        pytest.param(
            [V(pv("pv1", node="n1", phase="Bound")), C(pvc(volume="pv1", bound=True))],
            {"n2": (ERR_REASON_NODE_CONFLICT,), "n3": (ERR_REASON_NODE_CONFLICT,)},
            id="bound-pv-affinity",
        ),
        pytest.param(
            [C(pvc(volume="pv1", bound=True))], dict.fromkeys(NODES, (ERR_REASON_PV_NOT_EXIST,)), id="pv-missing"
        ),
        pytest.param(
            [V(by_name_field("pv1", "n1")), C(pvc(volume="pv1", bound=True))],
            dict.fromkeys(NODES, (ERR_REASON_NODE_CONFLICT,)),
            id="match-fields-never-match",  # upstream matches a node built from its labels only
        ),
    ]


def static_cases() -> list[Any]:
    big = {"size": "1Gi"}
    return [
        pytest.param([LOCAL, V(pv("pv1", node="n2")), C(pvc())], {"n1": _bind, "n3": _bind}, id="follows-the-pv"),
        pytest.param([LOCAL, C(pvc())], dict.fromkeys(NODES, _bind), id="no-pv-no-provisioner"),
        pytest.param([LOCAL, V(pv("pv1", **big)), C(pvc())], dict.fromkeys(NODES, _bind), id="too-small"),
        pytest.param([LOCAL, V(pv("pv1", cls="other")), C(pvc())], dict.fromkeys(NODES, _bind), id="other-class"),
        pytest.param(
            [LOCAL, V(pv("pv1", modes=("ReadOnlyMany",))), C(pvc())], dict.fromkeys(NODES, _bind), id="access-modes"
        ),
        pytest.param(
            [LOCAL, V(pv("pv1", volume_mode="Block")), C(pvc())], dict.fromkeys(NODES, _bind), id="volume-mode"
        ),
        pytest.param(
            [LOCAL, V(pv("pv1", phase="Released")), C(pvc())], dict.fromkeys(NODES, _bind), id="not-available"
        ),
        pytest.param(
            [LOCAL, V(pv("pv1", claim={"name": "other", "namespace": "default"})), C(pvc())],
            dict.fromkeys(NODES, _bind),
            id="claimed-by-another",
        ),
        pytest.param(
            [LOCAL, V(pv("pv1", labels={"tier": "slow"})), C(pvc(selector={"matchLabels": {"tier": "fast"}}))],
            dict.fromkeys(NODES, _bind),
            id="selector",
        ),
        pytest.param(
            [LOCAL, V(pv("pv1", labels={"tier": "fast"})), C(pvc(selector={"matchLabels": {"tier": "fast"}}))],
            {"n2": _bind, "n3": _bind},
            id="selector-matches",
        ),
        pytest.param(
            [LOCAL, V(pv("pv1", node="n3", phase="Bound", claim={"name": "data", "namespace": "default"})), C(pvc())],
            {"n1": _bind, "n2": _bind},
            id="pre-bound-pv-any-phase",
        ),
        pytest.param(
            [
                sc(storage_class("local", provisioner="csi.example.com")),
                C(pvc(annotations={"volume.kubernetes.io/selected-node": "n1"})),
            ],
            {"n2": _bind, "n3": _bind},
            id="selected-node-elsewhere",
        ),
    ]


_bind = (ERR_REASON_BIND_CONFLICT,)


@pytest.mark.parametrize(("objects", "expected"), bound_claim_cases() + static_cases())
def test_filter(objects: list[Any], expected: dict[str, tuple[str, ...]]) -> None:
    cache = cluster(*objects)
    _, _, status, verdicts = cycle(plugin_for(cache), cache, a_pod(claim_volume()))
    assert status.is_success
    assert rejections(verdicts) == expected
    assert all(s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE for s in verdicts.values() if not s.is_success)


def test_several_reasons_come_in_upstream_order() -> None:
    cache = cluster(LOCAL, V(pv("pv1", node="n1", phase="Bound")), C(pvc("a", volume="pv1", bound=True)), C(pvc("b")))
    _, _, _, verdicts = cycle(plugin_for(cache), cache, a_pod(claim_volume("a", "va"), claim_volume("b", "vb")))
    assert rejections(verdicts) == {
        "n1": (ERR_REASON_BIND_CONFLICT,),
        "n2": (ERR_REASON_NODE_CONFLICT, ERR_REASON_BIND_CONFLICT),
        "n3": (ERR_REASON_NODE_CONFLICT, ERR_REASON_BIND_CONFLICT),
    }


def test_the_smallest_fitting_pv_is_chosen_and_never_twice() -> None:
    cache = cluster(
        LOCAL,
        V(pv("huge", size="100Gi")),
        V(pv("small", size="5Gi")),
        V(pv("mid", size="8Gi")),
        C(pvc("a", size="5Gi")),
        C(pvc("b", size="6Gi")),
    )
    plugin = plugin_for(cache)
    state, _, _, verdicts = cycle(plugin, cache, a_pod(claim_volume("a", "va"), claim_volume("b", "vb")))
    assert verdicts["n1"].is_success
    chosen = {
        b.pvc["metadata"]["name"]: b.pv["metadata"]["name"] for b in state.read(STATE_KEY).by_node["n1"].static_bindings
    }
    assert chosen == {"a": "small", "b": "mid"}
    # A third claim finds only the huge one; a fourth none.
    cache.objects.apply(PERSISTENT_VOLUME_CLAIM, "ADDED", pvc("c", size="1Gi"))
    cache.objects.apply(PERSISTENT_VOLUME_CLAIM, "ADDED", pvc("d", size="1Gi"))
    pod = a_pod(*(claim_volume(c, f"v{c}") for c in "abcd"))
    _, _, _, verdicts = cycle(plugin, cache, pod)
    assert rejections(verdicts)["n1"] == _bind


# -- dynamic provisioning and storage capacity ----------------------------------------------------------------
CSI = "csi.example.com"


def csi_driver(capacity: bool) -> tuple[str, dict[str, Any]]:
    return CSI_DRIVER, {"metadata": {"name": CSI}, "spec": {"storageCapacity": capacity}}


def capacity(name: str, size: str | None, zone: str, *, maximum: str | None = None, cls: str = "csi") -> Any:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "kube-system"},
        "storageClassName": cls,
        "nodeTopology": {"matchLabels": {"zone": zone}},
    }
    if size is not None:
        obj["capacity"] = size
    if maximum is not None:
        obj["maximumVolumeSize"] = maximum
    return CSI_STORAGE_CAPACITY, obj


CSI_CLASS = sc(storage_class("csi", provisioner=CSI))
_space = (ERR_REASON_NOT_ENOUGH_SPACE,)


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        pytest.param([CSI_CLASS], {}, id="provisioner-no-driver-object"),
        pytest.param([CSI_CLASS, csi_driver(False)], {}, id="driver-without-capacity-tracking"),
        pytest.param([CSI_CLASS, csi_driver(True)], dict.fromkeys(NODES, _space), id="no-capacity-objects"),
        pytest.param(
            [CSI_CLASS, csi_driver(True), capacity("c1", "10Gi", "z1"), capacity("c2", "1Gi", "z2")],
            {"n3": _space},
            id="capacity-per-topology",
        ),
        pytest.param(
            [CSI_CLASS, csi_driver(True), capacity("c1", "100Gi", "z1", maximum="1Gi")],
            dict.fromkeys(NODES, _space),
            id="maximum-volume-size-wins",
        ),
        pytest.param(
            [CSI_CLASS, csi_driver(True), capacity("c1", "100Gi", "z1", cls="other")],
            dict.fromkeys(NODES, _space),
            id="other-class-capacity",
        ),
        pytest.param(
            [
                sc(
                    storage_class(
                        "csi",
                        provisioner=CSI,
                        topologies=[{"matchLabelExpressions": [{"key": "zone", "values": ["z2"]}]}],
                    )
                )
            ],
            {"n1": _bind, "n2": _bind},
            id="allowed-topologies",
        ),
    ],
)
def test_dynamic_provisioning(objects: list[Any], expected: dict[str, tuple[str, ...]]) -> None:
    cache = cluster(*objects, C(pvc(cls="csi")))
    plugin = plugin_for(cache)
    state, _, _, verdicts = cycle(plugin, cache, a_pod(claim_volume()))
    assert rejections(verdicts) == expected
    for node in set(NODES) - set(expected):
        provisions = state.read(STATE_KEY).by_node[node].dynamic_provisions
        assert [c["metadata"]["name"] for c in provisions] == ["data"]


def test_a_claim_to_provision_whose_class_vanished_is_an_error() -> None:
    cache = cluster(C(pvc(cls="csi", annotations={"volume.kubernetes.io/selected-node": "n1"})))
    cache.objects.apply(STORAGE_CLASS, "ADDED", storage_class("csi", provisioner=CSI))
    plugin = plugin_for(cache)
    state = CycleState()
    snapshot = cache.snapshot()
    _, status = plugin.pre_filter(state, a_pod(claim_volume()), snapshot)
    assert status.is_success
    cache.objects.apply(STORAGE_CLASS, "DELETED", storage_class("csi"))
    verdict = plugin.filter_node(state, a_pod(claim_volume()), cache.node("n1"))
    assert (verdict.code, verdict.reasons) == (Code.ERROR, ('failed to find storage class "csi"',))


# -- Reserve / Unreserve and the assume cache -----------------------------------------------------------------
def reserved(cache: ClusterCache, plugin: VolumeBinding, pod: Any, node: str) -> CycleState:
    state, _, _, verdicts = cycle(plugin, cache, pod)
    assert verdicts[node].is_success
    assert plugin.reserve(state, pod, node).is_success
    return state


def test_reserve_assumes_the_pv_so_the_next_pod_cannot_take_it_and_unreserve_gives_it_back() -> None:
    cache = cluster(LOCAL, V(pv("pv1", node="n2")), C(pvc("a")), C(pvc("b")))
    plugin = plugin_for(cache)
    first = a_pod(claim_volume("a"), name="p1", uid="u1")
    state = reserved(cache, plugin, first, "n2")
    assumed = plugin.binder.pv_cache.get("pv1")
    assert assumed["spec"]["claimRef"] == {
        "kind": "PersistentVolumeClaim",
        "namespace": "default",
        "name": "a",
        "uid": "uid-a",
        "apiVersion": "v1",
        "resourceVersion": "20",
    }
    assert assumed["metadata"]["annotations"] == {"pv.kubernetes.io/bound-by-controller": "yes"}
    assert "claimRef" not in cache.objects.pv("pv1")["spec"]  # the watched object is untouched
    assert not plugin.pre_bind_pre_flight(state, first, "n2").is_skip

    second = a_pod(claim_volume("b"), name="p2", uid="u2")
    _, _, _, verdicts = cycle(plugin, cache, second)
    assert rejections(verdicts) == dict.fromkeys(NODES, _bind)

    plugin.unreserve(state, first, "n2")
    assert plugin.binder.pv_cache.get("pv1") is cache.objects.pv("pv1")
    _, _, _, verdicts = cycle(plugin, cache, second)
    assert verdicts["n2"].is_success


def test_reserve_annotates_claims_to_provision() -> None:
    cache = cluster(CSI_CLASS, C(pvc(cls="csi")))
    plugin = plugin_for(cache)
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n3")
    assumed = plugin.binder.pvc_cache.get("data", "default")
    assert assumed["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "n3"
    # Another pod sharing the claim now only fits n3 (the fast path on the annotation).
    _, _, _, verdicts = cycle(plugin, cache, a_pod(claim_volume(), name="p2", uid="u2"))
    assert rejections(verdicts) == {"n1": _bind, "n2": _bind}
    plugin.unreserve(state, pod, "n3")
    assert (
        "volume.kubernetes.io/selected-node"
        not in plugin.binder.pvc_cache.get("data", "default")["metadata"]["annotations"]
    )


def test_reserve_of_a_pod_whose_claims_are_all_bound_assumes_nothing() -> None:
    cache = cluster(V(pv("pv1", node="n1", phase="Bound")), C(pvc(volume="pv1", bound=True)))
    plugin = plugin_for(cache)
    state = reserved(cache, plugin, a_pod(claim_volume()), "n1")
    assert state.read(STATE_KEY).all_bound
    assert len(plugin.binder.pv_cache) == 0


def test_assume_cache_newer_watch_version_supersedes_equal_one_does_not() -> None:
    cache = cluster(LOCAL, V(pv("pv1")), C(pvc()))
    plugin = plugin_for(cache)
    reserved(cache, plugin, a_pod(claim_volume()), "n1")
    pv_cache = plugin.binder.pv_cache
    cache.objects.apply(PERSISTENT_VOLUME, "MODIFIED", pv("pv1", rv="10"))  # a resync: same version
    assert pv_cache.is_assumed("pv1")
    newer = pv("pv1", rv="11")
    cache.objects.apply(PERSISTENT_VOLUME, "MODIFIED", newer)
    assert not pv_cache.is_assumed("pv1")
    assert pv_cache.get("pv1") is newer
    with pytest.raises(AssumeCacheError, match=r'^"pv1" is out of sync \(stored: 11, assume: 10\)$'):
        pv_cache.assume(pv("pv1", rv="10"))
    # Only the version assumed is restored: restoring an older one leaves a newer assumption alone.
    assumed = {**newer, "spec": {**newer["spec"], "claimRef": {"name": "x", "namespace": "default"}}}
    pv_cache.assume(assumed)
    pv_cache.restore(pv("pv1", rv="10"))
    assert pv_cache.get("pv1") is assumed
    pv_cache.restore(assumed)
    assert pv_cache.get("pv1") is newer
    cache.objects.apply(PERSISTENT_VOLUME, "DELETED", newer)
    assert pv_cache.get("pv1") is None
    with pytest.raises(AssumeCacheError, match=r'^persistentvolumes "pv1" not found$'):
        pv_cache.assume(newer)


def test_reserve_of_a_vanished_pv_is_an_error() -> None:
    cache = cluster(LOCAL, V(pv("pv1")), C(pvc()))
    plugin = plugin_for(cache)
    state, _, _, _ = cycle(plugin, cache, a_pod(claim_volume()))
    cache.objects.apply(PERSISTENT_VOLUME, "DELETED", pv("pv1"))
    status = plugin.reserve(state, a_pod(claim_volume()), "n1")
    assert (status.code, status.reasons) == (Code.ERROR, ('persistentvolumes "pv1" not found',))


# -- PreBind ----------------------------------------------------------------------------------------------------
class FakeClient:
    """Records PUTs; answers with the body at the next resourceVersion, or raises ``error``."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.error = error

    def _stored(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((kind, body))
        if self.error is not None:
            raise self.error
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        return stored

    async def replace_persistent_volume(self, *, body: dict[str, Any]) -> dict[str, Any]:
        return self._stored("pv", body)

    async def replace_persistent_volume_claim(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        assert namespace == body["metadata"]["namespace"]
        return self._stored("pvc", body)


class FakeTime:
    """A clock that sleeping advances; ``on_tick`` plays the PV controller between polls."""

    def __init__(self) -> None:
        self.now = 0.0
        self.ticks = 0
        self.on_tick: Any = None

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.ticks += 1
        if self.on_tick is not None:
            self.on_tick(self.ticks)


def wired(cache: ClusterCache, client: FakeClient | None, timeout: int = 600) -> tuple[VolumeBinding, FakeTime]:
    plugin = plugin_for(cache, bind_timeout_seconds=timeout)
    plugin.handle.client = client  # type: ignore[attr-defined]
    fake = FakeTime()
    plugin.binder.sleep, plugin.binder.clock = fake.sleep, fake.clock
    return plugin, fake


def pv_controller_binds(cache: ClusterCache, client: FakeClient, *, at_tick: int = 2) -> Any:
    """After ``at_tick`` polls, the watch delivers what the PV controller made of our writes: bound claims."""

    def tick(n: int) -> None:
        if n != at_tick:
            return
        for kind, body in client.calls:
            if kind == "pv":
                written = copy.deepcopy(body)
                written["metadata"]["resourceVersion"] = "11"
                cache.objects.apply(PERSISTENT_VOLUME, "MODIFIED", written)
                ref = body["spec"]["claimRef"]
                claim = copy.deepcopy(cache.objects.pvc(ref["namespace"], ref["name"]))
            else:
                claim = copy.deepcopy(body)
            claim["spec"]["volumeName"] = claim["spec"].get("volumeName") or "pvc-provisioned"
            claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
            claim["metadata"]["resourceVersion"] = "30"
            cache.objects.apply(PERSISTENT_VOLUME_CLAIM, "MODIFIED", claim)

    return tick


def test_pre_bind_writes_the_pv_and_waits_for_the_claim_to_be_bound() -> None:
    cache = cluster(LOCAL, V(pv("pv1", node="n2")), C(pvc()))
    client = FakeClient()
    plugin, fake = wired(cache, client)
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n2")
    fake.on_tick = pv_controller_binds(cache, client)
    status = asyncio.run(plugin.pre_bind(state, pod, "n2"))
    assert status.is_success
    assert [kind for kind, _ in client.calls] == ["pv"]
    body = client.calls[0][1]
    assert (body["spec"]["claimRef"]["name"], body["spec"]["claimRef"]["uid"]) == ("data", "uid-data")
    assert body["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    assert (fake.ticks, fake.now) == (2, 2.0)  # upstream polls every second, not at once


def test_pre_bind_writes_the_selected_node_on_claims_to_provision() -> None:
    cache = cluster(CSI_CLASS, C(pvc(cls="csi")))
    cache.objects.apply(PERSISTENT_VOLUME, "ADDED", pv("pvc-provisioned", cls="csi", node="n1", phase="Bound"))
    client = FakeClient()
    plugin, fake = wired(cache, client)
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n1")
    fake.on_tick = pv_controller_binds(cache, client, at_tick=1)
    assert asyncio.run(plugin.pre_bind(state, pod, "n1")).is_success
    [(kind, body)] = client.calls
    assert kind == "pvc"
    assert body["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "n1"


def test_pre_bind_pre_flight_says_whether_pre_bind_has_work() -> None:
    cache = cluster(LOCAL, V(pv("pv1", node="n2")), C(pvc()))
    plugin, _ = wired(cache, FakeClient())
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n2")
    assert plugin.pre_bind_pre_flight(state, pod, "n2") == SUCCESS
    status = plugin.pre_bind_pre_flight(state, pod, "n3")  # Reserve did not run for n3
    assert (status.code, status.message) == (Code.ERROR, 'no pod volume found for node "n3"')
    bound = cluster(LOCAL, V(pv("pv1", node="n2", phase="Bound")), C(pvc(volume="pv1", bound=True, phase="Bound")))
    plugin, _ = wired(bound, FakeClient())
    state = reserved(bound, plugin, pod, "n2")
    assert plugin.pre_bind_pre_flight(state, pod, "n2").is_skip


def test_pre_bind_times_out_with_upstreams_text() -> None:
    cache = cluster(LOCAL, V(pv("pv1", node="n2")), C(pvc()))
    plugin, fake = wired(cache, FakeClient(), timeout=3)
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n2")
    status = asyncio.run(plugin.pre_bind(state, pod, "n2"))
    assert (status.code, status.reasons) == (Code.ERROR, ("binding volumes: context deadline exceeded",))
    assert fake.now == 3.0


def test_pre_bind_with_zero_timeout_fails_at_once() -> None:
    cache = cluster(LOCAL, V(pv("pv1", node="n2")), C(pvc()))
    plugin, fake = wired(cache, FakeClient(), timeout=0)
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n2")
    status = asyncio.run(plugin.pre_bind(state, pod, "n2"))
    assert status.reasons == ("binding volumes: context deadline exceeded",)
    assert fake.ticks == 0


def test_pre_bind_api_error_fails_and_un_assumes_what_was_not_written() -> None:
    conflict = APIError(409, 'Operation cannot be fulfilled on persistentvolumes "pv1": the object has been modified')
    cache = cluster(LOCAL, V(pv("pv1", node="n2")), C(pvc()))
    plugin, _ = wired(cache, FakeClient(conflict))
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n2")
    status = asyncio.run(plugin.pre_bind(state, pod, "n2"))
    assert (status.code, status.reasons, status.error) == (Code.ERROR, (str(conflict),), conflict)
    assert not plugin.binder.pv_cache.is_assumed("pv1")


def test_pre_bind_fails_when_the_pv_controller_resets_the_claim_ref() -> None:
    cache = cluster(LOCAL, V(pv("pv1", node="n2")), C(pvc()))
    plugin, fake = wired(cache, FakeClient())
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n2")
    fake.on_tick = lambda n: cache.objects.apply(PERSISTENT_VOLUME, "MODIFIED", pv("pv1", node="n2", rv="12"))
    status = asyncio.run(plugin.pre_bind(state, pod, "n2"))
    assert status.reasons == ('binding volumes: ClaimRef got reset for pv "pv1"',)


@pytest.mark.parametrize(
    ("notes", "message"),
    [
        pytest.param({}, 'binding volumes: selectedNode annotation reset for PVC "data"', id="no-annotations"),
        pytest.param({"other": "x"}, 'binding volumes: provisioning failed for PVC "data"', id="annotation-removed"),
    ],
)
def test_pre_bind_fails_when_the_provisioner_hands_the_claim_back(notes: dict[str, str], message: str) -> None:
    cache = cluster(CSI_CLASS, C(pvc(cls="csi")))
    plugin, fake = wired(cache, FakeClient())
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n1")
    handed_back = pvc(cls="csi", rv="40", annotations=notes)
    fake.on_tick = lambda n: cache.objects.apply(PERSISTENT_VOLUME_CLAIM, "MODIFIED", handed_back)
    status = asyncio.run(plugin.pre_bind(state, pod, "n1"))
    assert status.reasons == (message,)


def test_pre_bind_without_a_client_is_an_error() -> None:
    cache = cluster(LOCAL, V(pv("pv1", node="n2")), C(pvc()))
    plugin, _ = wired(cache, None)
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n2")
    assert asyncio.run(plugin.pre_bind(state, pod, "n2")).code is Code.ERROR
    assert not plugin.binder.pv_cache.is_assumed("pv1")


# -- QueueingHints --------------------------------------------------------------------------------------------------
def hint(resource: EventResource, action: ActionType) -> Any:
    return hint_for(plugin_for(cluster()), ClusterEvent(resource, action))


def test_registered_events() -> None:
    registered = {
        (r.event.resource, r.event.action_type, r.hint is not None) for r in plugin_for(cluster()).events_to_register()
    }
    add_update = ActionType.ADD | ActionType.UPDATE
    assert registered == {
        (EventResource.STORAGE_CLASS, add_update, True),
        (EventResource.PERSISTENT_VOLUME_CLAIM, add_update, True),
        (EventResource.PERSISTENT_VOLUME, add_update, False),
        (EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL, False),
        (EventResource.CSI_NODE, add_update, True),
        (EventResource.CSI_DRIVER, ActionType.UPDATE, True),
        (EventResource.CSI_STORAGE_CAPACITY, add_update, True),
    }


TOPOLOGY = [{"matchLabelExpressions": [{"key": "zone", "values": ["z1"]}]}]
MIGRATED = "storage.alpha.kubernetes.io/migrated-plugins"


@pytest.mark.parametrize(
    ("resource", "old", "new", "expected"),
    [
        pytest.param(EventResource.STORAGE_CLASS, None, storage_class("x"), QUEUE, id="class-added"),
        pytest.param(
            EventResource.STORAGE_CLASS,
            storage_class("x"),
            storage_class("x", topologies=TOPOLOGY),
            QUEUE,
            id="topology",
        ),
        pytest.param(EventResource.STORAGE_CLASS, storage_class("x"), storage_class("x"), QUEUE_SKIP, id="class-same"),
        pytest.param(EventResource.PERSISTENT_VOLUME_CLAIM, None, pvc("data"), QUEUE, id="own-claim"),
        pytest.param(EventResource.PERSISTENT_VOLUME_CLAIM, None, pvc("web-0-scratch"), QUEUE, id="own-ephemeral"),
        pytest.param(EventResource.PERSISTENT_VOLUME_CLAIM, None, pvc("other"), QUEUE_SKIP, id="other-claim"),
        pytest.param(
            EventResource.PERSISTENT_VOLUME_CLAIM,
            None,
            {**pvc("data"), "metadata": {"name": "data", "namespace": "elsewhere"}},
            QUEUE_SKIP,
            id="other-namespace",
        ),
        pytest.param(EventResource.CSI_NODE, None, {"metadata": {"name": "n1"}}, QUEUE, id="csinode-added"),
        pytest.param(
            EventResource.CSI_NODE,
            {"metadata": {"name": "n1"}},
            {"metadata": {"name": "n1", "annotations": {MIGRATED: "kubernetes.io/gce-pd"}}},
            QUEUE,
            id="csinode-migrated",
        ),
        pytest.param(
            EventResource.CSI_NODE,
            {"metadata": {"name": "n1"}},
            {"metadata": {"name": "n1"}},
            QUEUE_SKIP,
            id="csinode-same",
        ),
        pytest.param(EventResource.CSI_DRIVER, csi_driver(True)[1], csi_driver(False)[1], QUEUE, id="capacity-off"),
        pytest.param(EventResource.CSI_DRIVER, csi_driver(False)[1], csi_driver(True)[1], QUEUE_SKIP, id="capacity-on"),
        pytest.param(EventResource.CSI_STORAGE_CAPACITY, None, capacity("c", "1Gi", "z1")[1], QUEUE, id="cap-added"),
        pytest.param(
            EventResource.CSI_STORAGE_CAPACITY,
            capacity("c", "1Gi", "z1")[1],
            capacity("c", "2Gi", "z1")[1],
            QUEUE,
            id="cap-grew",
        ),
        pytest.param(
            EventResource.CSI_STORAGE_CAPACITY,
            capacity("c", "2Gi", "z1")[1],
            capacity("c", "1Gi", "z1")[1],
            QUEUE_SKIP,
            id="cap-shrank",
        ),
        pytest.param(
            EventResource.CSI_STORAGE_CAPACITY,
            capacity("c", None, "z1")[1],
            capacity("c", "1Gi", "z1")[1],
            QUEUE,
            id="cap-appeared",
        ),
    ],
)
def test_hints(resource: EventResource, old: Any, new: Any, expected: Any) -> None:
    action = ActionType.ADD if old is None else ActionType.UPDATE
    pod = a_pod(claim_volume(), ephemeral_volume(), {"name": "inline", "csi": {"driver": CSI}})
    assert hint(resource, action)(pod, old, new) is expected


# -- profile -----------------------------------------------------------------------------------------------------
def test_the_default_profile_no_longer_omits_volume_binding() -> None:
    profile = resolve_profile("default-scheduler", SchedulerProfileSpec(), in_tree_registry())
    assert "VolumeBinding" not in profile.omitted_defaults


# -- through the framework's binding cycle ---------------------------------------------------------------------
def test_a_failed_pre_bind_in_the_binding_cycle_rolls_the_assumed_pv_back_and_forgets_the_pod() -> None:

    cache = cluster(LOCAL, V(pv("pv1", node="n2")), C(pvc()))
    points = {point: (VolumeBinding.name,) for point in (E.PRE_FILTER, E.FILTER, E.RESERVE, E.PRE_BIND)}
    framework = build([VolumeBinding], points, cache=cache)
    conflict = APIError(409, 'Operation cannot be fulfilled on persistentvolumes "pv1"')
    framework.handle.client = FakeClient(conflict)  # type: ignore[attr-defined]
    ((_, plugin),) = framework.pre_bind_plugins
    pod = a_pod(claim_volume())
    state = CycleState()
    result = schedule_pod(framework, state, pod, cache.snapshot())
    assert result.suggested_host == "n2"
    assumed = assume_and_reserve(framework, state, pod, result, cache)
    assert plugin.binder.pv_cache.is_assumed("pv1")
    status = asyncio.run(bind_pod(framework, state, assumed, result, cache))
    assert (status.code, status.message) == (
        Code.ERROR,
        'running PreBind plugin "VolumeBinding": Operation cannot be fulfilled on persistentvolumes "pv1"',
    )
    assert not plugin.binder.pv_cache.is_assumed("pv1")
    assert not cache.is_assumed(pod.uid)


# -- CSI migration: in-tree PVs judged in their CSI form (upstream tryTranslatePVToCSI) -----------------------
GA_ZONE = "topology.kubernetes.io/zone"
GKE_ZONE = "topology.gke.io/zone"
GCE_PLUGIN = "kubernetes.io/gce-pd"
EBS_PLUGIN = "kubernetes.io/aws-ebs"
BAD_EBS = "failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume (aws://z1/bad)"


def in_tree_pv(source: dict[str, Any], *, zone_key: str | None = GA_ZONE, **kwargs: Any) -> dict[str, Any]:
    volume = pv("pv1", node=None, **kwargs)
    volume["spec"].update(source)
    if zone_key is not None:
        term = {"matchExpressions": [{"key": zone_key, "operator": "In", "values": ["z1"]}]}
        volume["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    return volume


GCE_PD = {"gcePersistentDisk": {"pdName": "disk"}}
BAD_EBS_SOURCE = {"awsElasticBlockStore": {"volumeID": "aws://z1/bad"}}


def migration_cluster(*objects: tuple[str, dict[str, Any]]) -> ClusterCache:
    """n1: GA zone label, CSINode migrating GCE PD and EBS; n2: only the GCE PD CSI driver's zone label,
    same CSINode; n3: GA zone label, a CSINode without the annotation (nothing migrated there)."""
    cache = make_cache(
        [
            make_node("n1", labels={GA_ZONE: "z1"}),
            make_node("n2", labels={GKE_ZONE: "z1"}),
            make_node("n3", labels={GA_ZONE: "z1"}),
        ]
    )
    migrated = {MIGRATED: f"{GCE_PLUGIN},{EBS_PLUGIN}"}
    for name, notes in (("n1", migrated), ("n2", migrated), ("n3", {})):
        cache.objects.apply(CSI_NODE, "ADDED", {"metadata": {"name": name, "annotations": notes}, "spec": {}})
    for kind, obj in objects:
        cache.objects.apply(kind, "ADDED", obj)
    return cache


_node = (ERR_REASON_NODE_CONFLICT,)
UUR = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
BOUND = C(pvc(volume="pv1", bound=True, phase="Bound"))


@pytest.mark.parametrize(
    ("volume", "expected", "code"),
    [
        pytest.param(in_tree_pv(GCE_PD, phase="Bound"), {"n1": _node}, UUR, id="zone-key-becomes-csi-key"),
        pytest.param(
            in_tree_pv(GCE_PD, zone_key=None, phase="Bound", labels={GA_ZONE: "z1"}),
            {"n1": _node},
            UUR,
            id="zone-label-becomes-csi-affinity",
        ),
        pytest.param(
            in_tree_pv({"azureFile": {"shareName": "s"}}, phase="Bound"),
            {"n2": _node},
            UUR,
            id="migration-off-for-azure-file",
        ),
        pytest.param(
            in_tree_pv(BAD_EBS_SOURCE, zone_key=None, phase="Bound"),
            {"n1": (f"could not translate pv: {BAD_EBS}",), "n2": (f"could not translate pv: {BAD_EBS}",)},
            Code.ERROR,
            id="untranslatable-is-an-error-where-migrated",
        ),
    ],
)
def test_filter_judges_a_bound_in_tree_pv_in_its_csi_form(volume: dict[str, Any], expected: Any, code: Code) -> None:
    cache = migration_cluster(V(volume), BOUND)
    _, _, status, verdicts = cycle(plugin_for(cache), cache, a_pod(claim_volume()))
    assert status.is_success
    assert rejections(verdicts) == expected
    assert all(s.code is code for s in verdicts.values() if not s.is_success)


@pytest.mark.parametrize(
    ("source", "node", "reasons"),
    [
        pytest.param(GCE_PD, "n3", None, id="not-migrated-on-the-node"),
        pytest.param(
            GCE_PD,
            "n1",
            ('binding volumes: pv "pv1" node affinity doesn\'t match node "n1": no matching NodeSelectorTerms',),
            id="migrated-affinity-no-longer-matches",  # matching (Filter) does not translate; checkBindings does
        ),
        pytest.param(
            BAD_EBS_SOURCE,
            "n1",
            (f"binding volumes: failed to translate pv to csi: could not translate pv: {BAD_EBS}",),
            id="untranslatable",
        ),
    ],
)
def test_pre_bind_judges_the_written_pv_in_its_csi_form(source: Any, node: str, reasons: Any) -> None:
    cache = migration_cluster(LOCAL, V(in_tree_pv(source)), C(pvc()))
    client = FakeClient()
    plugin, fake = wired(cache, client)
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, node)
    fake.on_tick = pv_controller_binds(cache, client, at_tick=1)
    status = asyncio.run(plugin.pre_bind(state, pod, node))
    assert (status.code, status.reasons) == ((Code.SUCCESS, ()) if reasons is None else (Code.ERROR, reasons))


def test_pre_bind_judges_a_provisioned_in_tree_pv_in_its_csi_form() -> None:
    cache = migration_cluster(CSI_CLASS, C(pvc(cls="csi")))
    provisioned = in_tree_pv(BAD_EBS_SOURCE, cls="csi", phase="Bound")
    provisioned["metadata"]["name"] = "pvc-provisioned"
    cache.objects.apply(PERSISTENT_VOLUME, "ADDED", provisioned)
    client = FakeClient()
    plugin, fake = wired(cache, client)
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n1")
    fake.on_tick = pv_controller_binds(cache, client, at_tick=1)
    status = asyncio.run(plugin.pre_bind(state, pod, "n1"))
    assert (status.code, status.reasons) == (Code.ERROR, (f"binding volumes: could not translate pv: {BAD_EBS}",))


# -- a claim's malformed selector (upstream FindMatchingVolume's LabelSelectorAsSelector) ----------------------
BAD_KEY = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
BAD_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def expression(key: str, operator: str, values: list[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        body["values"] = values
    return body


@pytest.mark.parametrize(
    ("selector", "error"),
    [
        pytest.param(
            {"matchExpressions": [expression("tier", "Gt", ["1"])]},
            '"Gt" is not a valid label selector operator',
            id="operator",
        ),
        pytest.param(
            {"matchExpressions": [expression("tier", "In")]},
            "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty",
            id="in-without-values",
        ),
        pytest.param(
            {"matchExpressions": [expression("tier", "Exists", ["x"])]},
            'values: Invalid value: ["x"]: values set must be empty for exists and does not exist',
            id="exists-with-values",
        ),
        pytest.param({"matchLabels": {"bad key": "x"}}, f'key: Invalid value: "bad key": {BAD_KEY}', id="label-key"),
        pytest.param(
            {"matchLabels": {"tier": "x y"}}, f'values[0][tier]: Invalid value: "x y": {BAD_VALUE}', id="label-value"
        ),
        pytest.param(
            {"matchExpressions": [expression("bad key", "NotIn", [])]},
            f"[key: Invalid value: \"bad key\": {BAD_KEY}, values: Invalid value: null: for 'in', 'notin' operators, "
            "values set can't be empty]",
            id="several-errors-aggregated",
        ),
        pytest.param(
            {"matchLabels": {"tier": "fast"}, "matchExpressions": [expression("x", "Bad")]},
            '"Bad" is not a valid label selector operator',
            id="labels-then-expressions",
        ),
    ],
)
def test_a_malformed_claim_selector_is_an_error_of_filter(selector: dict[str, Any], error: str) -> None:
    cache = cluster(LOCAL, V(pv("pv1", labels={"tier": "fast"})), C(pvc(selector=selector)))
    _, _, status, verdicts = cycle(plugin_for(cache), cache, a_pod(claim_volume()))
    assert status.is_success
    message = f"error creating internal label selector for claim: default/data: {error}"
    assert {node: (s.code, s.reasons) for node, s in verdicts.items()} == dict.fromkeys(NODES, (Code.ERROR, (message,)))


# -- the pod deleted while PreBind waits (upstream checkBindings re-reads the pod lister) ----------------------
def test_pre_bind_fails_once_the_pods_deletion_is_watched() -> None:
    cache = cluster(LOCAL, V(pv("pv1", node="n2")), C(pvc()))
    plugin, fake = wired(cache, FakeClient())
    pod = a_pod(claim_volume())
    state = reserved(cache, plugin, pod, "n2")
    handle = plugin.handle
    assert isinstance(handle, FakeHandle)
    fake.on_tick = lambda n: handle.deleted.add(pod.uid) if n == 2 else None
    status = asyncio.run(plugin.pre_bind(state, pod, "n2"))
    assert (status.code, status.reasons) == (
        Code.ERROR,
        ('binding volumes: pod does not exist any more: pod "web-0" not found',),
    )
    assert fake.ticks == 2  # noticed at the first poll after the deletion, not at the timeout


def test_a_pod_whose_claims_are_bound_to_csi_volumes_without_affinity_visits_no_node() -> None:
    """Filter decides once for every node (the StatefulSet pod after its first start), and Reserve/PreBind
    behave as after a node-by-node Filter: nothing to assume, nothing for PreBind to do."""
    volume = pv("pv1", node=None, phase="Bound")
    volume["spec"]["csi"] = {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}
    cache = cluster(V(volume), BOUND)
    plugin = plugin_for(cache)
    pod = a_pod(claim_volume())
    state = CycleState()
    snapshot = cache.snapshot()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success

    def visited(*_: Any) -> Any:
        raise AssertionError("a node was visited")

    plugin.binder.find_pod_volumes = visited  # type: ignore[method-assign]
    assert plugin.filter(state, pod, snapshot.order, snapshot) is None
    assert plugin.filter_node(state, pod, snapshot.node_info(int(snapshot.order[1]))).is_success
    assert plugin.reserve(state, pod, "n2").is_success
    assert state.read(STATE_KEY).all_bound
    assert plugin.pre_bind_pre_flight(state, pod, "n2").is_skip
    assert len(plugin.binder.pv_cache) == 0


@pytest.mark.parametrize(
    "volume",
    [
        pytest.param(pv("pv1", node="n1", phase="Bound"), id="node-affinity"),
        pytest.param(in_tree_pv(GCE_PD, zone_key=None, phase="Bound"), id="in-tree-source-migration-could-translate"),
    ],
)
def test_bound_volumes_the_node_can_matter_for_are_judged_node_by_node(volume: dict[str, Any]) -> None:
    cache = migration_cluster(V(volume), BOUND)
    plugin = plugin_for(cache)
    state, _, status, _ = cycle(plugin, cache, a_pod(claim_volume()))  # vectorised == node by node, in there
    assert status.is_success
    assert not state.read(STATE_KEY).every_node_fits
