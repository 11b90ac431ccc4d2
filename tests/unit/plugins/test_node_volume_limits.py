"""NodeVolumeLimits: CSINode counts per driver, unique handles, migrated in-tree volumes, errors, hints (§2.16)."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.framework import QUEUE, QUEUE_SKIP, ActionType, ClusterEvent, Code, CycleState, EventResource
from kopf_scheduler.plugins.node_volume_limits import (
    ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,
    NodeVolumeLimits,
    VolumeCollector,
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
    cache.storage.apply("VolumeAttachment", "ADDED", _attachment("va9", "pv9"))
    cache.storage.apply("PersistentVolume", "ADDED", csi_pv("pv9", "h9"))
    assert verdict() == EXCEEDED
    assert collected == ["old0", "old0"]
    cache.storage.apply("VolumeAttachment", "DELETED", _attachment("va9", "pv9"))
    assert verdict() == "fits"
    cache.add_or_update_pod(
        make_pod("old1", uid="u-old1", node_name="n", spec={"volumes": [claim_volume("c-unbound")]})
    )
    assert verdict() == EXCEEDED
    assert collected[-2:] == ["old0", "old1"]
    cache.remove_pod("u-old1")
    assert verdict() == "fits"


def test_counts_of_deleted_nodes_are_not_kept_for_ever() -> None:
    """Node names churn (autoscaling): the counts kept for nodes gone from the cluster are dropped."""
    names = [f"n{i}" for i in range(40)]
    cache = fill(
        make_cache([make_node(n) for n in names]), *OBJECTS, *(("CSINode", csi_node(n, d_csi_io=2)) for n in names)
    )
    plugin = NodeVolumeLimits(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec={"volumes": [claim_volume("c1")]}))

    def cycle() -> None:
        snapshot = cache.snapshot()
        state = CycleState()
        plugin.pre_filter(state, pod, snapshot)
        plugin.filter(state, pod, slots(snapshot), snapshot)

    cycle()
    assert set(plugin._nodes) == set(names)
    for name in names[1:]:
        cache.remove_node(name)
    cycle()
    assert set(plugin._nodes) == {"n0"}
