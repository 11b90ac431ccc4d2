"""Storage in generated scenarios: classes, PersistentVolumes, claims, CSINodes, and pods that use them.

Why a second pass with its own random source: the volume plugins (VolumeBinding, VolumeZone, VolumeRestrictions,
NodeVolumeLimits; upstream ``pkg/scheduler/framework/plugins/{volumebinding,volumezone,volumerestrictions,
nodevolumelimits}``) only judge pods that have volumes, so a fraction of scenarios (:data:`STORAGE_FRACTION`)
get storage after the rest of the scenario is built. Drawing from ``random.Random(f"storage-{seed}")`` keeps
every other object of a seed exactly as it was before storage existed; a storage scenario only adds
volumes to some existing and pending pods (their seeds' results may change for that reason alone).

What a storage scenario holds (every cluster-scoped name carries the seed, so scenarios never meet):

- two StorageClasses without a provisioner (``kubernetes.io/no-provisioner``): one WaitForFirstConsumer, one
  Immediate; an unmatched claim of theirs is "didn't find available persistent volumes to bind" on both sides;
- dynamic provisioning (:meth:`StorageBuilder.provisioning`): WaitForFirstConsumer classes whose provisioner
  is :data:`CSI_DRIVER`, one with ``allowedTopologies`` (a zone) and one without; in some scenarios a
  CSIDriver with ``storageCapacity: true`` and CSIStorageCapacity objects by node (``kubernetes.io/hostname``
  topology, some too small, some nodes without any), so VolumeBinding says "did not have enough free
  storage"; unbound claims of those classes. The selected-node annotation upstream's PreBind writes is
  denied like its PV writes, and the harness provisions for our side (see volume_harness);
- PersistentVolumes with status ``Available`` (the runner writes statuses, there is no PV controller):
  local ones pinned to a node by ``kubernetes.io/hostname`` node affinity, zonal ones (zone label, which
  VolumeZone reads, and zone node affinity, which VolumeBinding reads), zone-labelled ones with no node
  affinity at all (:meth:`StorageBuilder.zone_label`: only VolumeZone can reject a node for them; GA or
  deprecated ``failure-domain.beta`` keys, a zone and/or a region, sometimes a multi-zone ``a__b`` value), CSI
  ones (``spec.csi`` of :data:`CSI_DRIVER`, counted by NodeVolumeLimits) and plain ones; some pre-bound to a
  claim by ``claimRef``;
- claims: bound to a PV (``spec.volumeName`` plus ``pv.kubernetes.io/bind-completed``, status ``Bound``, the
  PV's ``claimRef`` back), unbound WaitForFirstConsumer, unbound Immediate, ReadWriteOncePod claims in use by
  an existing pod; pods may also name a claim that does not exist;
- CSINodes for some nodes with an ``allocatable.count`` for :data:`CSI_DRIVER` (0 to 3);
- existing pods (in the claims' namespace, on a node the PV allows) that use bound claims: they take CSI
  attach slots and ReadWriteOncePod claims.
"""

from __future__ import annotations

import copy
import random
from typing import Any

STORAGE_FRACTION = 0.5
NO_PROVISIONER = "kubernetes.io/no-provisioner"
CSI_DRIVER = "csi.conformance.example.com"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ZONE_KEY = "topology.kubernetes.io/zone"
REGION_KEY = "topology.kubernetes.io/region"
BETA_ZONE_KEY = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION_KEY = "failure-domain.beta.kubernetes.io/region"
#: Every PV label VolumeZone reads.
VOLUME_ZONE_KEYS = (ZONE_KEY, REGION_KEY, BETA_ZONE_KEY, BETA_REGION_KEY)
HOSTNAME_KEY = "kubernetes.io/hostname"
SIZES = ("1Gi", "5Gi", "10Gi")
#: The volume plugins, in the order upstream's default profile runs their filters.
VOLUME_PLUGINS = ("VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone")
#: The storage kinds a scenario creates (and the model feeds to ``cache.objects``).
STORAGE_KINDS = (
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CSINode",
    "CSIDriver",
    "CSIStorageCapacity",
)

Obj = dict[str, Any]


def _gi(size: str) -> int:
    return int(size[:-2])


def _affinity(key: str, value: str) -> Obj:
    return {
        "required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}
    }


class StorageBuilder:
    """Adds storage to a built :class:`~tests.conformance.generator.Scenario` (see the module docstring)."""

    def __init__(self, scenario: Any, namespace: str, zones: list[str]) -> None:
        self.rng = random.Random(f"storage-{scenario.seed}")
        self.scenario = scenario
        self.namespace = namespace
        self.zones = zones
        self.prefix = f"c{scenario.seed}"
        self.wffc = f"{self.prefix}-wffc"
        self.immediate = f"{self.prefix}-immediate"
        self.dynamic = f"{self.prefix}-dynamic"
        self.dynamic_zonal = f"{self.prefix}-dynamic-zonal"
        #: claim name → the PV it is bound to (None when unbound).
        self.bound: dict[str, Obj | None] = {}

    def build(self) -> None:
        if self.rng.random() >= STORAGE_FRACTION:
            return
        self.classes()
        self.csinodes()
        for index in range(self.rng.randint(3, 8)):
            self.volume(index)
        self.claims()
        self.provisioning()
        self.existing_users()
        self.pending_users()

    # -- cluster objects -----------------------------------------------------------------------------------
    def classes(self) -> None:
        for name, mode in ((self.wffc, "WaitForFirstConsumer"), (self.immediate, "Immediate")):
            self.scenario.storage_classes.append(
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": name},
                    "provisioner": NO_PROVISIONER,
                    "volumeBindingMode": mode,
                }
            )

    def csinodes(self) -> None:
        for name in self.scenario.node_names:
            if self.rng.random() < 0.5:
                driver = {
                    "name": CSI_DRIVER,
                    "nodeID": name,
                    "allocatable": {"count": self.rng.choice([0, 1, 1, 2, 3])},
                }
                self.scenario.csinodes.append(
                    {
                        "apiVersion": "storage.k8s.io/v1",
                        "kind": "CSINode",
                        "metadata": {"name": name},
                        "spec": {"drivers": [driver]},
                    }
                )

    def volume(self, index: int) -> None:
        rng = self.rng
        kind = rng.choice(["local", "local", "zonal", "csi", "plain"])
        spec: Obj = {
            "capacity": {"storage": rng.choice(SIZES)},
            "accessModes": rng.choice([["ReadWriteOnce"]] * 3 + [["ReadWriteOncePod"], ["ReadWriteMany"]]),
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": rng.choice([self.wffc, self.wffc, self.immediate]),
        }
        labels: dict[str, str] = {"conformance/seed": str(self.scenario.seed)}
        if kind == "local":
            spec["local"] = {"path": f"/mnt/disk{index}"}
            spec["nodeAffinity"] = _affinity(HOSTNAME_KEY, rng.choice(self.scenario.node_names))
        elif kind == "csi":
            spec["csi"] = {"driver": CSI_DRIVER, "volumeHandle": f"{self.prefix}-handle{index}"}
        else:
            spec["hostPath"] = {"path": f"/mnt/host{index}"}
        if (kind == "zonal" or (kind == "csi" and rng.random() < 0.3)) and self.zones:
            zone = rng.choice(self.zones)
            labels[ZONE_KEY] = zone
            spec["nodeAffinity"] = _affinity(ZONE_KEY, zone)
        elif kind in ("plain", "csi") and self.zones and rng.random() < 0.6:
            labels.update(self.zone_label())
        self.scenario.volumes.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"{self.prefix}-pv{index}", "labels": labels},
                "spec": spec,
                "status": {"phase": "Available"},
            }
        )

    def zone_label(self) -> dict[str, str]:
        """VolumeZone's labels without node affinity: a zone and/or a region, GA or deprecated keys."""
        rng = self.rng
        beta = rng.random() < 0.35
        zone_key, region_key = (BETA_ZONE_KEY, BETA_REGION_KEY) if beta else (ZONE_KEY, REGION_KEY)
        out: dict[str, str] = {}
        roll = rng.random()
        if roll < 0.8:
            k = 2 if len(self.zones) > 1 and rng.random() < 0.3 else 1
            out[zone_key] = "__".join(sorted(rng.sample(self.zones, k=k)))
        if roll >= 0.6:
            out[region_key] = rng.choice(["region-1", "region-1", "region-2"])
        return out

    def claims(self) -> None:
        rng = self.rng
        for index, pv in enumerate(self.scenario.volumes):
            roll = rng.random()
            modes = pv["spec"]["accessModes"]
            if roll < 0.4 or ("ReadWriteOncePod" in modes and roll < 0.7):
                self.bind(pv, self.claim(f"bound{index}", pv["spec"]["storageClassName"], modes, self.smaller(pv)))
            elif roll < 0.5:
                pv["spec"]["claimRef"] = {"namespace": self.namespace, "name": f"prebound{index}"}
                if rng.random() < 0.7:  # else the pre-bound claim is missing
                    self.claim(f"prebound{index}", pv["spec"]["storageClassName"], modes, self.smaller(pv))
        for index in range(rng.randint(1, 3)):
            modes = rng.choice([["ReadWriteOnce"]] * 3 + [["ReadWriteOncePod"], ["ReadWriteMany"]])
            self.claim(f"wffc{index}", self.wffc, modes, rng.choice(SIZES))
        if rng.random() < 0.5:
            self.claim("immediate0", self.immediate, ["ReadWriteOnce"], "1Gi")

    def provisioning(self) -> None:
        """Dynamic provisioning: CSI classes (WaitForFirstConsumer), maybe capacity by node, unbound claims."""
        rng = self.rng
        zonal = rng.choice(self.zones) if self.zones else None
        for name, zone in ((self.dynamic, None), (self.dynamic_zonal, zonal)):
            storage_class: Obj = {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name},
                "provisioner": CSI_DRIVER,
                "volumeBindingMode": "WaitForFirstConsumer",
            }
            if zone is not None:
                storage_class["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE_KEY, "values": [zone]}]}]
            self.scenario.storage_classes.append(storage_class)
        if rng.random() < 0.7:
            self.capacities()
        for index in range(rng.randint(1, 3)):
            storage_class = rng.choice([self.dynamic, self.dynamic, self.dynamic_zonal])
            self.claim(f"dynamic{index}", storage_class, ["ReadWriteOnce"], rng.choice(SIZES))

    def capacities(self) -> None:
        """A CSIDriver that publishes capacity, and per-node capacities (some nodes none, some too small)."""
        rng = self.rng
        self.scenario.csi_drivers.append(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSIDriver",
                "metadata": {"name": CSI_DRIVER},
                "spec": {"storageCapacity": True, "attachRequired": True, "podInfoOnMount": False},
            }
        )
        for node in self.scenario.node_names:
            if rng.random() < 0.25:
                continue  # no capacity published for this node: not enough free storage there
            for storage_class in (self.dynamic, self.dynamic_zonal):
                self.scenario.capacities.append(
                    {
                        "apiVersion": "storage.k8s.io/v1",
                        "kind": "CSIStorageCapacity",
                        "metadata": {"name": f"{storage_class}-{node}", "namespace": self.namespace},
                        "storageClassName": storage_class,
                        "nodeTopology": {"matchLabels": {HOSTNAME_KEY: node}},
                        "capacity": rng.choice(["2Gi", "6Gi", "20Gi"]),
                    }
                )

    def smaller(self, pv: Obj) -> str:
        size = pv["spec"]["capacity"]["storage"]
        return self.rng.choice([s for s in SIZES if _gi(s) <= _gi(size)])

    def claim(self, name: str, storage_class: str, modes: list[str], size: str) -> Obj:
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "storageClassName": storage_class,
                "accessModes": list(modes),
                "resources": {"requests": {"storage": size}},
            },
            "status": {"phase": "Pending"},
        }
        self.scenario.claims.append(claim)
        self.bound[name] = None
        return claim

    def bind(self, pv: Obj, claim: Obj) -> None:
        """As the PV controller leaves a bound pair (upstream's binder reads these fields, not the phases)."""
        pv["spec"]["claimRef"] = {"namespace": self.namespace, "name": claim["metadata"]["name"]}
        pv["status"] = {"phase": "Bound"}
        claim["spec"]["volumeName"] = pv["metadata"]["name"]
        claim["metadata"]["annotations"] = {BIND_COMPLETED: "yes"}
        claim["status"] = {
            "phase": "Bound",
            "accessModes": list(pv["spec"]["accessModes"]),
            "capacity": dict(pv["spec"]["capacity"]),
        }
        self.bound[claim["metadata"]["name"]] = pv

    # -- pods ----------------------------------------------------------------------------------------------
    def node_allows(self, pv: Obj, node: Obj) -> bool:
        terms = ((pv["spec"].get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms") or []
        labels = node["metadata"]["labels"]
        return all(labels.get(e["key"]) in e["values"] for t in terms for e in t["matchExpressions"])

    def existing_users(self) -> None:
        nodes = {n["metadata"]["name"]: n for n in self.scenario.nodes}
        for name, pv in self.bound.items():
            if pv is None or self.rng.random() >= (0.8 if "ReadWriteOncePod" in pv["spec"]["accessModes"] else 0.5):
                continue
            users = [
                p
                for p in self.scenario.existing_pods
                if p["metadata"]["namespace"] == self.namespace and self.node_allows(pv, nodes[p["spec"]["nodeName"]])
            ]
            if users:
                add_claim(self.rng.choice(users), name)

    def pending_users(self) -> None:
        pending = self.scenario.pending
        previous_spec: Obj | None = None
        for index, pod in enumerate(pending):
            replica = index > 0 and previous_spec == pod.manifest["spec"]
            previous_spec = copy.deepcopy(pod.manifest["spec"])
            if replica:
                pod.manifest["spec"]["volumes"] = copy.deepcopy(
                    pending[index - 1].manifest["spec"].get("volumes") or []
                )
                if not pod.manifest["spec"]["volumes"]:
                    del pod.manifest["spec"]["volumes"]
                pod.features = pending[index - 1].features
            elif self.rng.random() < 0.45:
                for _ in range(self.rng.choice([1, 1, 2])):
                    add_claim(pod.manifest, self.pick_claim(pod.namespace))
                pod.features = tuple(sorted({*pod.features, *self.features(pod.manifest)}))

    def pick_claim(self, namespace: str) -> str:
        if namespace != self.namespace or self.rng.random() < 0.08:
            return "missing0"
        return str(self.rng.choice(sorted(self.bound)))

    def features(self, manifest: Obj) -> set[str]:
        """The volume plugins the pod's claims give something to judge."""
        out = {"VolumeBinding"}
        claims = {c["metadata"]["name"]: c for c in self.scenario.claims}
        for volume in manifest["spec"].get("volumes") or ():
            name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            claim, pv = claims.get(name), self.bound.get(name)
            if claim is not None and "ReadWriteOncePod" in claim["spec"]["accessModes"]:
                out.add("VolumeRestrictions")
            if pv is not None and set(VOLUME_ZONE_KEYS) & set(pv["metadata"]["labels"]):
                out.add("VolumeZone")
            if pv is not None and "csi" in pv["spec"] and self.scenario.csinodes:
                out.add("NodeVolumeLimits")
        return out


def add_claim(pod: Obj, claim: str) -> None:
    """Give ``pod`` a volume for ``claim`` (once: a pod naming one claim twice adds nothing to compare)."""
    volumes = pod["spec"].setdefault("volumes", [])
    if any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim for v in volumes):
        return
    volumes.append({"name": f"data{len(volumes)}", "persistentVolumeClaim": {"claimName": claim}})


def add_storage(scenario: Any, namespace: str, zones: list[str]) -> None:
    """Make ``scenario`` a storage scenario, or leave it as it is (decided by its seed alone)."""
    StorageBuilder(scenario, namespace, zones).build()
