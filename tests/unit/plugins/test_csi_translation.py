"""csi-translation-lib restated (plugins/helper/csi_translation.py): handles, PV translation, migrated-on-node."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.plugins.helper.csi_translation import (
    TranslationError,
    ebs_volume_id,
    is_migrated_on_node,
    try_translate_pv_to_csi,
)

ZONE = "topology.kubernetes.io/zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
REGION = "topology.kubernetes.io/region"
GCE = "kubernetes.io/gce-pd"
EBS = "kubernetes.io/aws-ebs"
GKE_ZONE = "topology.gke.io/zone"
EBS_ZONE = "topology.ebs.csi.aws.com/zone"
IN_TREE_FIELDS = ("gcePersistentDisk", "awsElasticBlockStore", "cinder", "azureDisk")


def gce_csi(location: str) -> dict[str, str]:
    return {"driver": "pd.csi.storage.gke.io", "volumeHandle": f"projects/UNSPECIFIED/{location}/disks/disk"}


def csi_node(migrated: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "n1"}
    if migrated is not None:
        meta["annotations"] = {"storage.alpha.kubernetes.io/migrated-plugins": migrated}
    return {"metadata": meta, "spec": {"drivers": []}}


def in_tree_pv(source: dict[str, Any], *, labels: dict[str, str] | None = None, terms: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "pv1", "labels": dict(labels or {})}, "spec": dict(source)}
    if terms is not None:
        body["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": terms}}
    return body


def expr(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


@pytest.mark.parametrize(
    ("kubernetes_id", "volume_id"),
    [("vol-1", "vol-1"), ("aws://us-east-1a/vol-1", "vol-1"), ("aws:///vol-2", "vol-2")],
)
def test_ebs_volume_id(kubernetes_id: str, volume_id: str) -> None:
    assert ebs_volume_id(kubernetes_id) == volume_id


@pytest.mark.parametrize(
    ("annotation", "plugin", "expected"),
    [
        (None, GCE, False),
        ("", GCE, False),
        (GCE, GCE, True),
        (f"{EBS},{GCE}", GCE, True),
        (f"{EBS}, {GCE}", GCE, False),  # upstream splits on "," and does not trim
        (EBS, GCE, False),
    ],
)
def test_is_migrated_on_node(annotation: str | None, plugin: str, expected: bool) -> None:
    assert is_migrated_on_node(plugin, csi_node(annotation)) is expected
    assert is_migrated_on_node(plugin, None) is False


GCE_SOURCE = {"gcePersistentDisk": {"pdName": "disk"}}
EBS_SOURCE = {"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1"}}


@pytest.mark.parametrize(
    ("pv", "migrated", "csi", "terms"),
    [
        pytest.param(in_tree_pv(GCE_SOURCE, terms=[{"matchExpressions": [expr(ZONE, "a")]}]), None, None,
                     [{"matchExpressions": [expr(ZONE, "a")]}], id="not-migrated-on-node"),
        pytest.param(in_tree_pv({"azureFile": {"shareName": "s"}}), "kubernetes.io/azure-file", None, None,
                     id="migration-off-for-plugin"),
        pytest.param(in_tree_pv(GCE_SOURCE, terms=[{"matchExpressions": [expr(ZONE, "a"), expr("x", "1")]}]), GCE,
                     gce_csi("zones/UNSPECIFIED"),
                     [{"matchExpressions": [expr(GKE_ZONE, "a"), expr("x", "1")]}], id="gce-zone-key-replaced"),
        pytest.param(in_tree_pv(GCE_SOURCE, labels={BETA_ZONE: "us-east1-a__us-east1-b"}), GCE,
                     gce_csi("regions/us-east1"),
                     [{"matchExpressions": [expr(GKE_ZONE, "us-east1-a", "us-east1-b")]}],
                     id="gce-zones-from-beta-label-added"),
        pytest.param(in_tree_pv(EBS_SOURCE, labels={ZONE: " b__a__a"}, terms=[{"matchExpressions": [expr("x", "1")]},
                                                                              {"matchExpressions": [expr("y", "2")]}]),
                     EBS, {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                     [{"matchExpressions": [expr("x", "1"), expr(EBS_ZONE, "a", "b")]},
                      {"matchExpressions": [expr("y", "2"), expr(EBS_ZONE, "a", "b")]}],
                     id="ebs-zones-added-to-every-term"),
        pytest.param(in_tree_pv(EBS_SOURCE, terms=[{"matchExpressions": [expr(BETA_ZONE, "a"),
                                                                          expr(BETA_REGION, "r")]}]), EBS,
                     {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                     [{"matchExpressions": [expr(EBS_ZONE, "a"), expr(REGION, "r")]}],
                     id="beta-zone-and-region"),
        pytest.param(in_tree_pv({"cinder": {"volumeID": "c1"}}, labels={ZONE: ""}), "kubernetes.io/cinder",
                     {"driver": "cinder.csi.openstack.org", "volumeHandle": "c1"}, None, id="cinder-empty-zone-label"),
        pytest.param(in_tree_pv({"azureDisk": {"diskURI": "uri"}}, terms=[{"matchExpressions": [expr(ZONE, "a")]}]),
                     "kubernetes.io/azure-disk", {"driver": "disk.csi.azure.com", "volumeHandle": "uri"},
                     [{"matchExpressions": [expr(ZONE, "a")]}], id="azure-disk-topology-untouched"),
    ],
)  # fmt: skip
def test_try_translate_pv_to_csi(pv: dict[str, Any], migrated: str | None, csi: Any, terms: Any) -> None:
    original = repr(pv)
    translated = try_translate_pv_to_csi(pv, csi_node(migrated))
    assert repr(pv) == original  # the watched object is never mutated
    if csi is None:
        assert translated is pv
        return
    assert translated["spec"]["csi"] == csi
    assert not any(key in translated["spec"] for key in IN_TREE_FIELDS)
    assert (translated["spec"].get("nodeAffinity") or {}).get("required", {}).get("nodeSelectorTerms") == terms


@pytest.mark.parametrize(
    ("pv", "plugin", "message"),
    [
        (in_tree_pv({"awsElasticBlockStore": {"volumeID": "aws://z/bad"}}), EBS,
         "could not translate pv: failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume "
         "(aws://z/bad)"),
        (in_tree_pv(GCE_SOURCE, labels={ZONE: "us-east1-a__us-west1-b"}), GCE,
         "could not translate pv: failed to get region from zones: multiple or no regions gotten from zones, got: "
         "map[us-east1:{} us-west1:{}]"),
        (in_tree_pv(GCE_SOURCE, labels={ZONE: "a__b"}), GCE,
         "could not translate pv: failed to get region from zones: zone in unexpected format, expected: "
         "{locale}-{region}-{zone}, got: a"),
        (in_tree_pv({"azureDisk": {"diskURI": "u", "kind": "Dedicated"}}), "kubernetes.io/azure-disk",
         "could not translate pv: kind(Dedicated) is not supported in csi migration"),
    ],
)  # fmt: skip
def test_translation_errors(pv: dict[str, Any], plugin: str, message: str) -> None:
    with pytest.raises(TranslationError) as caught:
        try_translate_pv_to_csi(pv, csi_node(plugin))
    assert str(caught.value) == message
