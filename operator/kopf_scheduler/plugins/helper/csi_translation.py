"""CSI migration: in-tree volumes seen as the CSI volumes that replace them, as csi-translation-lib does.

Upstream ``k8s.io/csi-translation-lib`` (``translate.go`` and ``plugins/*.go``), v0.36, restated for the two
plugins that need it, on the raw API dicts of :mod:`kopf_scheduler.state.objects`:

- NodeVolumeLimits counts an in-tree volume (inline or a PV) as ``<csi driver>/<volume handle>`` when
  migration is on for its plugin (``isCSIMigrationOn``: the node has a CSINode and the plugin is one of
  :data:`MIGRATION_ON`);
- VolumeBinding (``binder.go``'s ``tryTranslatePVToCSI``) judges an in-tree PV's node affinity after the
  translation rewrote its zone topology to the CSI driver's key, when migration is on for its plugin and the
  node's CSINode lists the plugin in its ``storage.alpha.kubernetes.io/migrated-plugins`` annotation.

Only what those decisions read is translated: the CSI source (driver and handle) and the node affinity;
volume attributes, secrets and access modes are left as they were.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

Obj = Mapping[str, Any]

#: CSINode annotation listing the in-tree plugins migrated to CSI on that node (comma-separated).
ANN_MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"


@dataclass(frozen=True, slots=True)
class InTreePlugin:
    """One in-tree volume plugin csi-translation-lib migrates: its volume source field and names."""

    source: str
    in_tree_name: str
    csi_driver: str
    #: The CSI driver's zone topology key its PV translation moves the zone to (None: topology untouched).
    topology_key: str | None = None


#: csi-translation-lib's in-tree plugins, in no significant order (each source field names one plugin).
IN_TREE_PLUGINS = (
    InTreePlugin("gcePersistentDisk", "kubernetes.io/gce-pd", "pd.csi.storage.gke.io", "topology.gke.io/zone"),
    InTreePlugin("awsElasticBlockStore", "kubernetes.io/aws-ebs", "ebs.csi.aws.com", "topology.ebs.csi.aws.com/zone"),
    InTreePlugin(
        "cinder", "kubernetes.io/cinder", "cinder.csi.openstack.org", "topology.cinder.csi.openstack.org/zone"
    ),
    InTreePlugin("azureDisk", "kubernetes.io/azure-disk", "disk.csi.azure.com"),
    InTreePlugin("azureFile", "kubernetes.io/azure-file", "file.csi.azure.com"),
    InTreePlugin("vsphereVolume", "kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    InTreePlugin("portworxVolume", "kubernetes.io/portworx-volume", "pxd.portworx.com"),
)
BY_IN_TREE_NAME = {plugin.in_tree_name: plugin for plugin in IN_TREE_PLUGINS}
#: The plugins migration is on for in 1.36 (upstream ``isCSIMigrationOn`` / ``isCSIMigrationOnForPlugin``).
MIGRATION_ON = frozenset(
    {"kubernetes.io/aws-ebs", "kubernetes.io/gce-pd", "kubernetes.io/azure-disk", "kubernetes.io/cinder",
     "kubernetes.io/portworx-volume"}
)  # fmt: skip


class TranslationError(ValueError):
    """A volume csi-translation-lib cannot translate (the text is upstream's)."""


def migratable_plugin(source_holder: Obj) -> InTreePlugin | None:
    """The in-tree plugin of an inline volume or a PV spec (``IsInlineMigratable`` / ``IsPVMigratable``)."""
    for plugin in IN_TREE_PLUGINS:
        if source_holder.get(plugin.source) is not None:
            return plugin
    return None


def is_csi_migration_on(csi_node: Obj | None, in_tree_name: str) -> bool:
    """NodeVolumeLimits' ``isCSIMigrationOn``: the node has a CSINode and migration is on for the plugin."""
    return csi_node is not None and in_tree_name in MIGRATION_ON


def is_migrated_on_node(in_tree_name: str, csi_node: Obj | None) -> bool:
    """Upstream ``isPluginMigratedToCSIOnNode``: the CSINode's migrated-plugins annotation names the plugin."""
    if csi_node is None:
        return False
    listed = ((csi_node.get("metadata") or {}).get("annotations") or {}).get(ANN_MIGRATED_PLUGINS) or ""
    return in_tree_name in listed.split(",")


# -- volume handles ---------------------------------------------------------------------------------------
_GCE_UNSPECIFIED = "UNSPECIFIED"
_BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
_GA_ZONE = "topology.kubernetes.io/zone"
_BETA_REGION = "failure-domain.beta.kubernetes.io/region"
_GA_REGION = "topology.kubernetes.io/region"
#: How a label lists the zones of a multi-zone volume.
_ZONE_DELIMITER = "__"


def ebs_volume_id(kubernetes_id: str) -> str:
    """``KubernetesVolumeIDToEBSVolumeID``: ``aws://<zone>/<vol-id>`` (or a bare id) to the EBS volume id."""
    if not kubernetes_id.startswith("aws://"):
        return kubernetes_id
    aws_id = urlsplit(kubernetes_id).path.strip("/")
    if not aws_id.startswith("vol-") or "/" in aws_id:
        raise TranslationError(
            f"failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume ({kubernetes_id})"
        )
    return aws_id


def _gce_region(zones: list[str]) -> str:
    regions = set()
    for zone in zones:
        parts = zone.split("-")
        if len(parts) != 3:
            raise TranslationError(f"zone in unexpected format, expected: {{locale}}-{{region}}-{{zone}}, got: {zone}")
        regions.add("-".join(parts[:2]))
    if len(regions) != 1:
        # Go prints the set (a map) with its keys sorted.
        shown = " ".join(f"{region}:{{}}" for region in sorted(regions))
        raise TranslationError(f"multiple or no regions gotten from zones, got: map[{shown}]")
    return regions.pop()


def _gce_pv_handle(pv: Obj, pd_name: str) -> str:
    labels = (pv.get("metadata") or {}).get("labels") or {}
    zones = (labels.get(_BETA_ZONE) or labels.get(_GA_ZONE) or "").split(_ZONE_DELIMITER)
    if len(zones) == 1 and zones[0]:
        return f"projects/{_GCE_UNSPECIFIED}/zones/{zones[0]}/disks/{pd_name}"
    if len(zones) > 1:
        try:
            region = _gce_region(zones)
        except TranslationError as exc:
            raise TranslationError(f"failed to get region from zones: {exc}") from exc
        return f"projects/{_GCE_UNSPECIFIED}/regions/{region}/disks/{pd_name}"
    return f"projects/{_GCE_UNSPECIFIED}/zones/{_GCE_UNSPECIFIED}/disks/{pd_name}"


def translated_handle(plugin: InTreePlugin, source: Obj, pv: Obj | None) -> str:
    """The CSI volume handle csi-translation-lib gives an inline volume (``pv`` None) or an in-tree PV
    (only for the plugins of :data:`MIGRATION_ON`)."""
    if plugin.source == "awsElasticBlockStore":
        return ebs_volume_id(source.get("volumeID") or "")
    if plugin.source == "gcePersistentDisk":
        pd_name = source.get("pdName") or ""
        if pv is None:
            return f"projects/{_GCE_UNSPECIFIED}/zones/{_GCE_UNSPECIFIED}/disks/{pd_name}"
        return _gce_pv_handle(pv, pd_name)
    if plugin.source == "azureDisk":
        kind = source.get("kind")
        if kind is not None and str(kind).lower() != "managed":
            raise TranslationError(f"kind({kind}) is not supported in csi migration")
        return source.get("diskURI") or ""
    # cinder, portworxVolume
    return source.get("volumeID") or ""


# -- PVs ----------------------------------------------------------------------------------------------------
def try_translate_pv_to_csi(pv: Obj, csi_node: Obj | None) -> Obj:
    """Upstream ``tryTranslatePVToCSI``: the CSI form of an in-tree PV migrated on the node, else ``pv``.

    Raises :class:`TranslationError` (``could not translate pv: ...``) when the PV cannot be translated.
    """
    plugin = translation_plugin(pv, csi_node)
    return pv if plugin is None else translate_pv_to_csi(pv, plugin)


def translation_plugin(pv: Obj, csi_node: Obj | None) -> InTreePlugin | None:
    """The in-tree plugin whose CSI translation applies to ``pv`` on the node of ``csi_node``: a PV of a
    plugin migration is on for, which the node's CSINode lists as migrated; else None."""
    plugin = migratable_plugin(pv.get("spec") or {})
    if plugin is None or plugin.in_tree_name not in MIGRATION_ON:
        return None
    return plugin if is_migrated_on_node(plugin.in_tree_name, csi_node) else None


def translate_pv_to_csi(pv: Obj, plugin: InTreePlugin) -> dict[str, Any]:
    """``TranslateInTreePVToCSI`` of a PV of ``plugin`` (one of :data:`MIGRATION_ON`): a copy whose in-tree
    source is replaced by its CSI source and whose zone topology uses the driver's key."""
    clone: dict[str, Any] = copy.deepcopy(dict(pv))
    spec = clone.setdefault("spec", {})
    try:
        handle = translated_handle(plugin, spec[plugin.source], clone)
    except TranslationError as exc:
        raise TranslationError(f"could not translate pv: {exc}") from exc
    if plugin.topology_key is not None:
        _translate_topology(clone, plugin.topology_key)
    del spec[plugin.source]
    spec["csi"] = {"driver": plugin.csi_driver, "volumeHandle": handle}
    return clone


def _terms(pv: Obj) -> list[dict[str, Any]]:
    required = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    return required.get("nodeSelectorTerms") or []


def _expressions(pv: Obj) -> list[dict[str, Any]]:
    return [expr for term in _terms(pv) for expr in term.get("matchExpressions") or ()]


def _topology_labels(pv: Obj) -> tuple[str, str]:
    """Upstream ``getTopologyLabel``: GA or beta zone and region keys, by the node affinity, then the labels."""
    keys = {expr.get("key") for expr in _expressions(pv)}
    labels = (pv.get("metadata") or {}).get("labels") or {}
    for present in (keys, labels):
        if _GA_ZONE in present:
            return _GA_ZONE, _GA_REGION
        if _BETA_ZONE in present:
            return _BETA_ZONE, _BETA_REGION
    return _GA_ZONE, _GA_REGION


def _replace_key(pv: Obj, old: str, new: str) -> None:
    for expr in _expressions(pv):
        if expr.get("key") == old:
            expr["key"] = new


def _translate_topology(pv: dict[str, Any], csi_key: str) -> None:
    """Upstream ``translateTopologyFromInTreeToCSI``: the zone key of the node affinity becomes ``csi_key``;
    a PV without one gets ``csi_key In <zones of its zone label>`` added to every term; a beta region key
    becomes the GA one."""
    zone_key, region_key = _topology_labels(pv)
    if any(expr.get("key") == zone_key and expr.get("values") for expr in _expressions(pv)):
        _replace_key(pv, zone_key, csi_key)
    else:
        label = ((pv.get("metadata") or {}).get("labels") or {}).get(zone_key)
        if label is not None:
            _add_topology(pv, csi_key, label.split(_ZONE_DELIMITER))
    if region_key == _BETA_REGION and any(
        expr.get("key") == _BETA_REGION and expr.get("values") for expr in _expressions(pv)
    ):
        _replace_key(pv, _BETA_REGION, _GA_REGION)


def _add_topology(pv: dict[str, Any], key: str, zones: list[str]) -> None:
    """Upstream ``addTopology``: ``key In zones`` (trimmed, deduplicated, sorted) added to every term; nothing
    when no zone is left (upstream's error, which its caller ignores)."""
    values = sorted({zone.strip() for zone in zones} - {""})
    if not values:
        return
    affinity = pv["spec"].setdefault("nodeAffinity", {}) or {}
    pv["spec"]["nodeAffinity"] = affinity
    required = affinity.setdefault("required", {}) or {}
    affinity["required"] = required
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = terms
    for term in terms:
        added = {"key": key, "operator": "In", "values": values}
        term["matchExpressions"] = [*(term.get("matchExpressions") or ()), added]
