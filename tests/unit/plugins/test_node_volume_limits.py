"""NodeVolumeLimits: CSINode counts per driver, unique handles, migrated in-tree volumes, errors, hints (§2.16)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from kopf_scheduler.framework import QUEUE, QUEUE_SKIP, ActionType, ClusterEvent, Code, CycleState, EventResource
from kopf_scheduler.plugins.node_volume_limits import (
    ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,
    NodeVolumeLimits,
    VolumeCollector,
    attachment_volumes,
    volume_limits,
)
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, pod_info, slots
from tests.unit.plugins._storage import claim_volume, csi_node, fill, pv, pvc, storage_class


def csi_pv(name: str, handle: str, driver: str = "d.csi.io") -> dict[str, Any]:
    return pv(name, csi={"driver": driver, "volumeHandle": handle})


def ebs(volume_id: str) -> dict[str, Any]:
    return {"name": f"e-{volume_id[-3:]}", "awsElasticBlockStore": {"volumeID": volume_id}}


OBJECTS = [
    ("PersistentVolume", csi_pv("pv1", "h1")),
    ("PersistentVolume", csi_pv("pv2", "h2")),
    ("PersistentVolume", pv("pv-ebs", awsElasticBlockStore={"volumeID": "aws://zone-a/vol-1"})),
    ("PersistentVolumeClaim", pvc("c1", volume="pv1")),
    ("PersistentVolumeClaim", pvc("c1-again", volume="pv1")),
    ("PersistentVolumeClaim", pvc("c2", volume="pv2")),
    ("PersistentVolumeClaim", pvc("c-ebs", volume="pv-ebs")),
    ("PersistentVolumeClaim", pvc("c-unbound", sc="csi")),
    ("StorageClass", storage_class("csi", provisioner="d.csi.io")),
]


def run(existing: list[list[dict[str, Any]]], wanted: list[dict[str, Any]], node: dict[str, Any] | None) -> Any:
    pods = [make_pod(f"old{i}", node_name="n", spec={"volumes": v}) for i, v in enumerate(existing)]
    cache = fill(make_cache([make_node("n")], pods), *OBJECTS, *([("CSINode", node)] if node else []))
    snapshot = cache.snapshot()
    plugin = NodeVolumeLimits(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec={"volumes": wanted}))
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    if not status.is_success:
        return status.code
    result = plugin.filter(state, pod, slots(snapshot), snapshot)
    if result is None:
        return "fits"
    status = result.status_at(0)
    return (status.code, status.message)


EXCEEDED = (Code.UNSCHEDULABLE, ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED)


@pytest.mark.parametrize(
    ("existing", "wanted", "node", "expected"),
    [
        ([], [{"name": "cm", "configMap": {"name": "x"}}], csi_node("n", d_csi_io=0), Code.SKIP),
        ([], [claim_volume("c1")], csi_node("n", d_csi_io=1), "fits"),
        ([], [claim_volume("c1")], csi_node("n", d_csi_io=0), EXCEEDED),
        ([], [claim_volume("c1")], None, "fits"),  # no CSINode: no limits
        ([], [claim_volume("c1")], csi_node("n", d_csi_io=None), "fits"),  # driver without a count
        ([[claim_volume("c2")]], [claim_volume("c1")], csi_node("n", d_csi_io=1), EXCEEDED),
        ([[claim_volume("c2")]], [claim_volume("c1")], csi_node("n", d_csi_io=2), "fits"),
        # The same volume (handle) through another claim is already attached: it does not count again.
        ([[claim_volume("c1-again")]], [claim_volume("c1")], csi_node("n", d_csi_io=1), "fits"),
        ([[claim_volume("c2")]], [claim_volume("c1")], csi_node("n", other_csi_io=0), "fits"),
        # An unbound claim counts against its class's provisioner.
        ([[claim_volume("c2")]], [claim_volume("c-unbound")], csi_node("n", d_csi_io=1), EXCEEDED),
        # Migrated in-tree: an EBS PV and the same inline EBS volume are one ebs.csi.aws.com volume.
        ([[claim_volume("c-ebs")]], [ebs("vol-1")], csi_node("n", ebs_csi_aws_com=1), "fits"),
        ([[claim_volume("c-ebs")]], [ebs("vol-2")], csi_node("n", ebs_csi_aws_com=1), EXCEEDED),
        # A missing claim of an existing pod is skipped; of the pod itself it is UUR.
        ([[claim_volume("gone")]], [claim_volume("c1")], csi_node("n", d_csi_io=1), "fits"),
        (
            [],
            [claim_volume("gone")],
            csi_node("n", d_csi_io=1),
            (
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                'looking up PVC default/gone: persistentvolumeclaim "gone" not found',
            ),
        ),
        (
            [],
            [ebs("aws://z/bad")],
            csi_node("n", ebs_csi_aws_com=1),
            (
                Code.ERROR,
                "converting volume(e-bad) from inline to csi: failed to translate Kubernetes ID to EBS Volume ID "
                "Invalid format for AWS volume (aws://z/bad)",
            ),
        ),
    ],
)
def test_verdicts(existing: list[list[dict[str, Any]]], wanted: list[dict[str, Any]], node: Any, expected: Any) -> None:
    assert run(existing, wanted, node) == expected


def test_hints() -> None:
    plugin = NodeVolumeLimits(handle=FakeHandle())
    pod = pod_info(make_pod("p", spec={"volumes": [claim_volume("c1"), {"name": "eph", "ephemeral": {}}]}))
    updated = hint_for(plugin, ClusterEvent(EventResource.CSI_NODE, ActionType.UPDATE))
    assert updated(pod, csi_node("n", d=1), csi_node("n", d=2)) is QUEUE
    assert updated(pod, csi_node("n", d=2), csi_node("n", d=1)) is QUEUE_SKIP
    assert updated(pod, csi_node("n"), csi_node("n", e=1)) is QUEUE
    deleted = hint_for(plugin, ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE))
    assert deleted(pod, make_pod("o", node_name="n", spec={"volumes": [claim_volume("x")]}), None) is QUEUE
    assert deleted(pod, make_pod("o", spec={"volumes": [claim_volume("x")]}), None) is QUEUE_SKIP
    assert (
        deleted(pod, make_pod("o", node_name="n", spec={"volumes": [{"name": "e", "emptyDir": {}}]}), None)
        is QUEUE_SKIP
    )
    added = hint_for(plugin, ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD))
    assert added(pod, None, pvc("c1")) is QUEUE
    assert added(pod, None, pvc("p-eph")) is QUEUE
    assert added(pod, None, pvc("c9")) is QUEUE_SKIP
    detached = hint_for(plugin, ClusterEvent(EventResource.VOLUME_ATTACHMENT, ActionType.DELETE))
    attachment = {"metadata": {"name": "va"}, "spec": {"attacher": "ebs.csi.aws.com", "nodeName": "n"}}
    assert detached(pod, attachment, None) is QUEUE
    inline = pod_info(make_pod(spec={"volumes": [ebs("vol-1")]}))
    assert detached(inline, attachment, None) is QUEUE
    other = {"metadata": {"name": "va"}, "spec": {"attacher": "pd.csi.storage.gke.io", "nodeName": "n"}}
    assert detached(inline, other, None) is QUEUE_SKIP
    csi_node_add = [
        r for r in plugin.events_to_register() if r.event == ClusterEvent(EventResource.CSI_NODE, ActionType.ADD)
    ]
    assert len(csi_node_add) == 1
    assert csi_node_add[0].hint is None


def _attachment(name: str, pv_name: str, node: str = "n", attacher: str = "d.csi.io") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"attacher": attacher, "nodeName": node, "source": {"persistentVolumeName": pv_name}},
    }


@pytest.mark.parametrize(
    ("attachments", "existing", "limit", "expected"),
    [
        # A volume still attached to the node with no pod using it takes a slot (upstream counts it).
        ([_attachment("va2", "pv2")], [], 1, EXCEEDED),
        ([_attachment("va2", "pv2")], [], 2, "fits"),
        # Attached to another node: not ours to count.
        ([_attachment("va2", "pv2", node="other")], [], 1, "fits"),
        # The attachment of a volume a pod on the node uses is that pod's volume: counted once.
        ([_attachment("va2", "pv2")], [[claim_volume("c2")]], 2, "fits"),
        # As upstream (csi.go Filter): only volumes of pods on the node are dropped from the new pod's volumes,
        # so an attachment of the very volume the pod wants, with no pod using it, still counts beside it.
        ([_attachment("va1", "pv1")], [], 1, EXCEEDED),
    ],
)
def test_volume_attachments_on_the_node_count(
    attachments: list[dict[str, Any]], existing: list[list[dict[str, Any]]], limit: int, expected: Any
) -> None:
    pods = [make_pod(f"old{i}", node_name="n", spec={"volumes": v}) for i, v in enumerate(existing)]
    objects = [*OBJECTS, ("CSINode", csi_node("n", d_csi_io=limit))]
    cache = fill(make_cache([make_node("n")], pods), *objects, *(("VolumeAttachment", a) for a in attachments))
    snapshot = cache.snapshot()
    plugin = NodeVolumeLimits(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec={"volumes": [claim_volume("c1")]}))
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot)
    result = plugin.filter(state, pod, slots(snapshot), snapshot)
    got = "fits" if result is None else (result.status_at(0).code, result.status_at(0).message)
    assert got == expected


def test_a_nodes_count_is_kept_between_cycles_until_its_pods_or_storage_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counted volumes of a node are reused while nothing they come from changed, and recounted (with the
    verdict following) when a pod lands on the node, a VolumeAttachment appears or a pod leaves."""
    old = make_pod("old0", node_name="n", spec={"volumes": [claim_volume("c2")]})
    cache = fill(make_cache([make_node("n")], [old]), *OBJECTS, ("CSINode", csi_node("n", d_csi_io=2)))
    plugin = NodeVolumeLimits(handle=FakeHandle(cache))
    collected: list[str] = []
    real_collect = VolumeCollector.collect

    def counting(self: VolumeCollector, pod: Any, csi: Any, *, new_pod: bool, into: Any) -> None:
        if not new_pod:
            collected.append(pod.name)
        real_collect(self, pod, csi, new_pod=new_pod, into=into)

    monkeypatch.setattr(VolumeCollector, "collect", counting)

    def verdict() -> Any:
        snapshot = cache.snapshot()
        pod = pod_info(make_pod(spec={"volumes": [claim_volume("c1")]}))
        state = CycleState()
        plugin.pre_filter(state, pod, snapshot)
        result = plugin.filter(state, pod, slots(snapshot), snapshot)
        return "fits" if result is None else (result.status_at(0).code, result.status_at(0).message)

    assert (verdict(), verdict(), collected) == ("fits", "fits", ["old0"])  # counted once for two cycles
    cache.objects.apply("VolumeAttachment", "ADDED", _attachment("va9", "pv9"))
    cache.objects.apply("PersistentVolume", "ADDED", csi_pv("pv9", "h9"))
    assert verdict() == EXCEEDED
    assert collected == ["old0", "old0"]
    cache.objects.apply("VolumeAttachment", "DELETED", _attachment("va9", "pv9"))
    assert verdict() == "fits"
    cache.add_or_update_pod(
        make_pod("old1", uid="u-old1", node_name="n", spec={"volumes": [claim_volume("c-unbound")]})
    )
    assert verdict() == EXCEEDED
    assert collected[-2:] == ["old0", "old1"]
    cache.remove_pod("u-old1")
    assert verdict() == "fits"


def test_a_slot_taken_over_by_another_node_is_counted_afresh() -> None:
    """Node names churn (autoscaling) and a new node reuses a deleted node's slot: its own limits and pods are
    counted, never the deleted node's, and what is kept stays within the slots the table has."""
    names = [f"n{i}" for i in range(40)]
    cache = fill(
        make_cache([make_node(n) for n in names]), *OBJECTS, *(("CSINode", csi_node(n, d_csi_io=2)) for n in names)
    )
    plugin = NodeVolumeLimits(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec={"volumes": [claim_volume("c1")]}))

    def rejected() -> set[str]:
        snapshot = cache.snapshot()
        state = CycleState()
        plugin.pre_filter(state, pod, snapshot)
        result = plugin.filter(state, pod, slots(snapshot), snapshot)
        order = [snapshot.node_info(slot).name for slot in slots(snapshot).tolist()]
        return set() if result is None else {name for name, no in zip(order, result.rejected, strict=True) if no}

    assert rejected() == set()
    for name in names[1:]:
        cache.remove_node(name)
    fresh = [f"m{i}" for i in range(39)]
    fill(cache, *(("CSINode", csi_node(n, d_csi_io=0)) for n in fresh))
    for name in fresh:
        cache.add_or_update_node(make_node(name))
    assert rejected() == set(fresh)
    assert plugin._counts is not None
    assert len(plugin._counts.version) == cache.table.capacity


# -- the kept counts against the walk upstream does in every Filter --------------------------------------------
_DRIVERS = ("a.csi.io", "b.csi.io")


def _walked_verdict(cache: Any, plugin: NodeVolumeLimits, pod: Any, node_name: str) -> Any:
    """Upstream's Filter for one node, restated plainly: the pod's volumes, the node's pods' volumes and
    VolumeAttachments collected afresh, then the per-driver comparison."""
    storage = cache.objects
    collector = VolumeCollector(storage, plugin.random_prefix)
    csi = storage.csi_node(node_name)
    wanted: dict[str, str] = {}
    try:
        collector.collect(pod, csi, new_pod=True, into=wanted)
    except LookupError as exc:
        return (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, str(exc))
    except ValueError as exc:
        return (Code.ERROR, str(exc))
    limits = volume_limits(csi)
    if not wanted or not limits:
        return "fits"
    attached: dict[str, str] = {}
    try:
        for existing in cache.node(node_name).pods.values():
            collector.collect(existing, csi, new_pod=False, into=attached)
    except ValueError as exc:
        return (Code.ERROR, str(exc))
    counts = Counter(attached.values())
    on_node = attachment_volumes(storage, storage.by_node("VolumeAttachment", node_name), node_name)
    counts.update(driver for key, driver in on_node.items() if key not in attached)
    new = Counter(driver for key, driver in wanted.items() if key not in attached)
    for driver, count in new.items():
        if driver in limits and counts[driver] + count > limits[driver]:
            return EXCEEDED
    return "fits"


def _random_csi_node(rng: random.Random, name: str) -> dict[str, Any]:
    limits = {d.replace(".", "_"): rng.choice([None, 0, 1, 2, 3, 5]) for d in _DRIVERS if rng.random() < 0.7}
    return csi_node(name, **limits)


def _random_volumes(rng: random.Random, claims: list[str]) -> list[dict[str, Any]]:
    volumes = [claim_volume(c, name=f"v{i}") for i, c in enumerate(rng.sample(claims, rng.randint(0, 3)))]
    if rng.random() < 0.1:
        volumes.append(claim_volume("gone", name="v-gone"))
    return volumes


def _verdicts(plugin: NodeVolumeLimits, cache: Any, pod: Any) -> tuple[list[str], list[Any]]:
    snapshot = cache.snapshot()
    order = [snapshot.node_info(slot).name for slot in slots(snapshot).tolist()]
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    assert status.is_success
    result = plugin.filter(state, pod, slots(snapshot), snapshot)
    got = [
        "fits" if result is None or not result.rejected[i] else (result.status_at(i).code, result.status_at(i).message)
        for i in range(len(order))
    ]
    return order, got


def _random_change(rng: random.Random, cache: Any, claims: list[str], pods: list[str], step: int) -> None:
    """One of: a pod lands on a node or leaves, a CSINode changes, a VolumeAttachment comes or goes, a node
    goes or comes."""
    change = rng.random()
    live = list(cache.node_names())
    if change < 0.35:
        volumes = [v for v in _random_volumes(rng, claims) if v["persistentVolumeClaim"]["claimName"] != "gone"]
        cache.add_or_update_pod(
            make_pod(f"p{step}", uid=f"u{step}", node_name=rng.choice(live), spec={"volumes": volumes})
        )
        pods.append(f"u{step}")
    elif change < 0.5 and pods:
        cache.remove_pod(pods.pop(rng.randrange(len(pods))))
    elif change < 0.6:
        cache.objects.apply("CSINode", "ADDED", _random_csi_node(rng, rng.choice(live)))
    elif change < 0.7:
        attachment = _attachment(f"va{step % 4}", f"pv{rng.randrange(12)}", node=rng.choice(live))
        attachment["spec"]["attacher"] = rng.choice(_DRIVERS)
        cache.objects.apply("VolumeAttachment", rng.choice(["ADDED", "DELETED"]), attachment)
    elif change < 0.75 and len(live) > 2:
        cache.remove_node(rng.choice(live))
    elif change < 0.8:
        cache.add_or_update_node(make_node(f"m{step}"))


@pytest.mark.parametrize("seed", range(30))
def test_kept_counts_agree_with_the_walk_through_random_changes(seed: int) -> None:
    """On random clusters (nodes with and without CSINodes and limits, shared volumes, unbound and missing
    claims, VolumeAttachments), through random pod, node, CSINode and attachment changes between cycles,
    the kept counts give every node the verdict of the walk upstream does."""
    rng = random.Random(seed)
    claims = [f"c{i}" for i in range(12)]
    objects = [
        *(("PersistentVolume", csi_pv(f"pv{i}", f"h{i % 9}", driver=rng.choice(_DRIVERS))) for i in range(12)),
        *(("PersistentVolumeClaim", pvc(c, volume=f"pv{i}")) for i, c in enumerate(claims[:10])),
        *(("PersistentVolumeClaim", pvc(c, sc="csi-a")) for c in claims[10:]),
        ("StorageClass", storage_class("csi-a", provisioner="a.csi.io")),
    ]
    names = [f"n{i}" for i in range(8)]
    cache = fill(make_cache([make_node(n) for n in names]), *objects)
    for name in names:
        if rng.random() < 0.8:
            cache.objects.apply("CSINode", "ADDED", _random_csi_node(rng, name))
    plugin = NodeVolumeLimits(handle=FakeHandle(cache))
    pods: list[str] = []
    rejections = 0
    for step in range(40):
        _random_change(rng, cache, claims, pods, step)
        pod = pod_info(make_pod(f"new{step}", spec={"volumes": _random_volumes(rng, claims) or [claim_volume("c0")]}))
        order, got = _verdicts(plugin, cache, pod)
        assert got == [_walked_verdict(cache, plugin, pod, name) for name in order], f"step {step}"
        rejections += sum(verdict != "fits" for verdict in got)
    assert rejections  # the walk rejects somewhere: the comparison is not all "fits"


def test_a_plugin_used_on_another_cache_counts_that_cache() -> None:
    """Slots and their version numbers belong to one cache's node table: a plugin handed a snapshot of
    another cache (what-if and the tests build their own) must not read the first cache's counts."""
    pod = pod_info(make_pod(spec={"volumes": [claim_volume("c1")]}))
    roomy = fill(make_cache([make_node("n")]), *OBJECTS, ("CSINode", csi_node("n", d_csi_io=1)))
    full = fill(make_cache([make_node("n")]), *OBJECTS, ("CSINode", csi_node("n", d_csi_io=0)))
    plugin = NodeVolumeLimits(handle=FakeHandle(roomy))
    verdicts = []
    for cache in (roomy, full, roomy):
        snapshot = cache.snapshot()
        state = CycleState()
        plugin.pre_filter(state, pod, snapshot)
        verdicts.append(plugin.filter(state, pod, slots(snapshot), snapshot) is None)
    assert verdicts == [True, False, True]
