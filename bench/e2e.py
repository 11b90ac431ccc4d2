"""End-to-end benchmark: kopf-scheduler against upstream kube-scheduler on one real API server.

``make bench`` (or ``python -m bench.e2e``) runs it and writes ``bench/results/e2e.json``,
``bench/results/e2e-bound-over-time.png`` and the "End-to-end benchmark" section of ``docs/benchmarks.md``.

Method (modelled on upstream ``test/integration/scheduler_perf``, see ``/work/shared/reference/control-plane.md``
section 5):

* **Control plane**: :class:`tools.localcluster.LocalCluster` in *light* mode (etcd + kube-apiserver only)
  with ``unlimited=True`` (no in-flight limits, no API Priority and Fairness). No kwok and no
  kube-controller-manager, on purpose: like scheduler_perf we create plain Node objects marked Ready
  (4 CPU, 32Gi, 110 pods) with no kubelet. kwok would spend this 2-core machine's CPU moving every bound
  pod to Running (three more writes per pod, during the measurement), and the controller-manager's
  node-lifecycle controller would see nodes without heartbeats go NotReady after its grace period and
  taint them (``NoSchedule``/``NoExecute``), changing what the schedulers see mid-run. Light mode also
  disables the ``TaintNodesByCondition`` admission plugin, so the nodes are created untainted. We delete the
  pods of a run ourselves (grace period 0), so no garbage or namespace controller is needed.
* **Fairness**: the schedulers run one at a time against the same API server with the same nodes and the same
  pods, each run in a fresh namespace whose pods all exist (pending, with that scheduler's
  ``schedulerName``) *before* the scheduler process is started. Both use the admin identity
  (``system:masters``). kube-scheduler gets client QPS/burst 5000 (as scheduler_perf) and a profile equal to
  ours: upstream's defaults minus the plugins kopf-scheduler does not implement (computed from our builder;
  none since issue 12, so upstream runs its unmodified default profile).
  kopf-scheduler is the real ``kopf-scheduler run`` process with a ``SchedulerProfile`` whose spec is empty
  (= upstream's defaults). Repetitions interleave the schedulers (kube, kopf, ceiling, kube, kopf, ...) so
  slow drifts of the shared machine's load hit all of them alike.
* **The ceiling**: ``bench/_e2e_ceiling.py`` binds the same pods round-robin with no filtering or scoring
  (asyncio + aiohttp, 64 requests in flight): how fast this API server accepts Bindings. For the gang workloads
  it makes every write the two gang schedulers make (3.0 per pod: nominations, PodGroupScheduled, Bindings,
  Events; ``--gangs``), each gang in one rack, still deciding nothing.
* **Measurements**: a watch in this harness on the run's namespace. SchedulingThroughput exactly as
  scheduler_perf computes it (:mod:`bench._e2e_stats`): 1 s ticks from the moment the scheduler process is
  spawned, counting pods whose ``spec.nodeName`` went from empty to set; average, p50, p90, p99 in pods/s.
  Per-pod latency = watch receive time of the bind − max(watch receive time of the creation, the spawn of
  the scheduler process) — the pods exist before the scheduler does, so this is the latency of a backlog,
  startup included. Peak RSS = ``VmHWM`` from ``/proc/<pid>/status`` and CPU seconds = utime + stime from
  ``/proc/<pid>/stat``, both read after the last bind, before the process is stopped (whole process
  lifetime: start-up, initial LIST, scheduling). The machine is shared and its speed moves by tens of percent
  from minute to minute: ``speed_probe_ms_before``/``_after`` are the CPU time of a fixed pure-Python loop
  (:func:`speed_probe_ms`) just before the scheduler starts and after it stopped, so the CPU figures of runs
  made at different moments can be told apart from the machine's (lower is faster).

* **Volumes** (``csi-pvs``, scheduler_perf's SchedulingCSIPVs): each pod mounts its own claim, created
  pre-bound to its own CSI PV (PV ``claimRef`` + claim ``volumeName``, both phases Bound written through the
  status subresource, as scheduler_perf's CreatePodWithPersistentVolume), so no PV controller is needed and
  VolumeBinding's PreBind has nothing to write; every node gets a CSINode with the driver's 39-volume limit
  (NodeVolumeLimits counts against it). scheduler_perf also sets ``attachable-volumes-csi-*`` in the node's
  allocatable; we leave the Node objects, shared with the other workloads, as they are (the CSINode is the
  limit both schedulers read). The admission plugin StorageObjectInUseProtection puts protection finalizers on
  claims and PVs and no controller removes them here, so after each run the harness drops them and deletes the
  run's claims and PVs (:func:`delete_volumes`). The ceiling ignores volumes, as it ignores everything else.

* **Preemption** (``preemption``, and ``preemption-5000`` at scheduler_perf's 5000Nodes size; PreemptionAsync):
  every node starts full of low-priority pods (four ``pod-low-priority`` pods of 900m CPU each, 3.6 of 4 CPUs,
  created bound to their node so both schedulers find the same state); among the pending pods every
  :data:`PREEMPTOR_EVERY`-th is a ``pod-high-priority`` preemptor (3 CPU, PriorityClass ``bench-high`` = 10) that
  must evict three victims, and the rest are ``pod-default`` (100m, always fits). scheduler_perf creates its
  preemptors at 5/s while the measured pods arrive; here, as in every workload, all pending pods exist before the
  scheduler starts. Victims have ``terminationGracePeriodSeconds: 0``, so the schedulers' DELETEs remove them at
  once (there is no kubelet). A run completes when every pending pod, preemptors included, is bound. As in
  scheduler_perf's 1000Nodes and 5000Nodes cases, there are as many pending pods as nodes: a node has room for four
  pod-default pods, and a preemptor takes three of those slots, so far more pending pods than nodes would leave some
  with no room.

* **Devices** (``claims``, after scheduler_perf's SchedulingWithResourceClaimTemplate): a DeviceClass of a fake
  driver (:data:`DRA_DRIVER`, CEL selector on the driver), a ResourceSlice per node with
  :data:`DEVICES_PER_NODE` devices, and for each pending pod its own ResourceClaim asking for one device of the
  class (created before the scheduler starts; scheduler_perf creates them from templates through the
  resourceclaim controller, which light mode does not run). Both schedulers allocate: PreBind writes each
  claim's allocation and reservation before the Binding, so a bound pod costs two more writes. Claims carry
  the delete-protection finalizer afterwards; the harness drops it and deletes the run's claims
  (:func:`delete_claims`). The ceiling binds without allocating.

* **Gangs** (``gangs``, the workload-aware issue's "1000 nodes, 500 gangs of 8"): every eight pending pods are the
  members of one PodGroup (scheduling.k8s.io/v1alpha2, ``gang.minCount: 8``), each naming it in
  ``spec.schedulingGroup``; the PodGroups exist before the pods. kopf-scheduler schedules them with a second
  SchedulerProfile that enables GangScheduling (:data:`KOPF_GANG_PROFILE`); kube-scheduler runs with the four
  workload-aware feature gates and its default profile minus the TopologyAwareWorkloadScheduling plugins the gate
  adds (our profile has none), so both run upstream's defaults plus GangScheduling (``bench/_e2e_gangs.py``). A run
  is complete when every pod is bound, and the row counts the gangs bound whole and partly (must be 0).
  ``gangs-topology`` is the same gangs, each PodGroup's members kept inside one rack (``schedulingConstraints``;
  every node is labelled with its rack of 50): both run GangScheduling, TopologyPlacementGenerator and
  PodGroupPodsCount, and a gang bound over two racks makes the run incomplete. ``gangs-coscheduling`` is the same
  gangs as scheduler-plugins' Coscheduling PodGroups (kopf-scheduler only).

Sizes are configurable with environment variables (see :class:`Config`); the defaults are the issue's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from bench._e2e_apicalls import requests_between, writes_per_pod
from bench._e2e_apicalls import scrape as scrape_requests
from bench._e2e_gangs import (
    GANG_SIZE,
    KOPF_COSCHEDULING_SPEC,
    KOPF_GANG_SPEC,
    KOPF_TOPOLOGY_GANG_SPEC,
    KUBE_GATE_PLUGINS_NOT_IN_OUR_PROFILE,
    KUBE_GATES,
    RACK_KEY,
    create_pod_groups,
    delete_pod_groups,
    gang_name,
    gang_outcome,
    rack_of,
    with_coscheduling_group,
    with_scheduling_group,
)
from bench._e2e_pinning import parse_cpus, pin_process
from bench._e2e_stats import ThroughputSampler, latency_percentiles_ms, pod_latencies, summarize
from bench._machine_lock import refuse_if_busy
from tools.localcluster import REPO_ROOT, LocalCluster, _child_preexec, default_bin_dir

RESULTS_DIR = REPO_ROOT / "bench" / "results"
DOC_PATH = REPO_ROOT / "docs" / "benchmarks.md"

KUBE, KOPF, CEILING = "kube-scheduler", "kopf-scheduler", "ceiling"
SCHEDULER_NAMES = {KUBE: "bench-kube", KOPF: "bench-kopf", CEILING: "bench-ceiling"}
#: kopf-scheduler's SchedulerProfile for the gang workload (GangScheduling enabled; bench/_e2e_gangs.py).
KOPF_GANG_PROFILE = "bench-kopf-gangs"
#: kopf-scheduler's SchedulerProfile for the topology-constrained gangs (bench/_e2e_gangs.py).
KOPF_TOPOLOGY_GANG_PROFILE = "bench-kopf-topology-gangs"
#: kopf-scheduler's SchedulerProfile for the same gangs as Coscheduling PodGroups (scheduler-plugins' API).
KOPF_COSCHEDULING_PROFILE = "bench-kopf-coscheduling"
#: scheduler-plugins' PodGroup CRD, as the chart ships it (coscheduling.installCRD).
COSCHEDULING_CRD = (
    REPO_ROOT / "charts" / "kopf-scheduler" / "files" / "coscheduling" / "scheduling.x-k8s.io_podgroups.yaml"
)

HOSTNAME_KEY = "kubernetes.io/hostname"
ZONE_KEY = "topology.kubernetes.io/zone"
REGION_KEY = "topology.kubernetes.io/region"
ZONES = ("zone-a", "zone-b", "zone-c")

#: scheduler_perf's node-default.yaml (capacity == allocatable).
NODE_RESOURCES = {"cpu": "4", "memory": "32Gi", "pods": "110"}
#: scheduler_perf's pod-default.yaml.
POD_RESOURCES = {"cpu": "100m", "memory": "500Mi"}


# --------------------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------------------


def base_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    """scheduler_perf's ``pod-default.yaml`` with our schedulerName."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {}},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10.2",
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": dict(POD_RESOURCES), "limits": dict(POD_RESOURCES)},
                }
            ],
        },
    }


def basic_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    return base_pod(name, scheduler_name)


def gang_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    """pod-default as a member of its gang: pods ``pod-00000`` to ``pod-00007`` make ``gang-00000``, and so on."""
    return with_scheduling_group(base_pod(name, scheduler_name), gang_name(int(name.rsplit("-", 1)[1]), GANG_SIZE))


def coscheduling_gang_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    """:func:`gang_pod`'s gangs as Coscheduling groups: the pod-group label instead of ``spec.schedulingGroup``."""
    return with_coscheduling_group(base_pod(name, scheduler_name), gang_name(int(name.rsplit("-", 1)[1]), GANG_SIZE))


def topology_spread_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    """scheduler_perf's ``pod-with-topology-spreading.yaml``: hard zone spread, maxSkew 5."""
    pod = base_pod(name, scheduler_name)
    pod["metadata"]["labels"] = {"color": "blue"}
    pod["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 5,
            "topologyKey": ZONE_KEY,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"color": "blue"}},
        }
    ]
    return pod


def pod_affinity_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    """scheduler_perf's ``pod-with-preferred-pod-affinity.yaml`` (own namespace instead of sched-0/1)."""
    pod = base_pod(name, scheduler_name)
    pod["metadata"]["labels"] = {"color": "red"}
    pod["spec"]["affinity"] = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"color": "red"}},
                        "topologyKey": HOSTNAME_KEY,
                    },
                }
            ]
        }
    }
    return pod


def node_affinity_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    """Preferred node affinity: weight 10 for zone-a, weight 5 for zone-b."""
    pod = base_pod(name, scheduler_name)
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {"matchExpressions": [{"key": ZONE_KEY, "operator": "In", "values": ["zone-a"]}]},
                },
                {
                    "weight": 5,
                    "preference": {"matchExpressions": [{"key": ZONE_KEY, "operator": "In", "values": ["zone-b"]}]},
                },
            ]
        }
    }
    return pod


#: scheduler_perf's SchedulingCSIPVs: the CSI driver of ``pv-csi.yaml`` and the per-node volume limit of its
#: ``csiNodeAllocatable``.
CSI_DRIVER = "ebs.csi.aws.com"
CSI_NODE_LIMIT = 39
#: Labels the harness's PVs with the run's namespace, so a run's PVs (cluster-scoped) can be deleted together.
PV_NAMESPACE_LABEL = "bench.kopf-scheduler.dev/namespace"


def csi_pv_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    """pod-default with one volume from the claim of the same name (scheduler_perf's CreatePodWithPersistentVolume)."""
    pod = base_pod(name, scheduler_name)
    pod["spec"]["volumes"] = [{"name": "vol", "persistentVolumeClaim": {"claimName": name}}]
    return pod


#: scheduler_perf's PreemptionAsync: pod-low-priority.yaml (no priority, 900m), pod-high-priority.yaml (10, 3 CPU).
LOW_PRIORITY_RESOURCES = {"cpu": "900m", "memory": "500Mi"}
HIGH_PRIORITY_RESOURCES = {"cpu": "3000m", "memory": "500Mi"}
LOW_PRIORITY_PODS_PER_NODE = 4
HIGH_PRIORITY_CLASS = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "bench-high"},
    "value": 10,
    "description": "PreemptionAsync's pod-high-priority (priority 10)",
}
#: One pending pod in this many is a preemptor (scheduler_perf: one every 200 ms while ~160+ pods/s arrive).
PREEMPTOR_EVERY = 25


def _with_resources(pod: dict[str, Any], resources: dict[str, str]) -> dict[str, Any]:
    container = pod["spec"]["containers"][0]
    container["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    return pod


def low_priority_pod(name: str, node: str) -> dict[str, Any]:
    """pod-low-priority.yaml, already bound to ``node`` (it fills the node before the scheduler starts)."""
    pod = _with_resources(base_pod(name, "default-scheduler"), LOW_PRIORITY_RESOURCES)
    pod["spec"]["nodeName"] = node
    return pod


def preemption_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    """Every :data:`PREEMPTOR_EVERY`-th pod is pod-high-priority.yaml, the others pod-default.yaml."""
    pod = base_pod(name, scheduler_name)
    if int(name.rsplit("-", 1)[-1]) % PREEMPTOR_EVERY == PREEMPTOR_EVERY - 1:
        pod["metadata"]["labels"]["bench-role"] = "preemptor"
        pod["spec"]["priorityClassName"] = HIGH_PRIORITY_CLASS["metadata"]["name"]
        _with_resources(pod, HIGH_PRIORITY_RESOURCES)
    return pod


def pv_name(namespace: str, claim: str) -> str:
    """PVs are cluster-wide: the run's namespace makes the name unique, as scheduler_perf prefixes it."""
    return f"{namespace}-{claim}"


def bound_pvc_manifest(namespace: str, claim: str) -> dict[str, Any]:
    """scheduler_perf's ``pvc.yaml`` pre-bound to its own PV (``volumeName``; ``status`` is written separately)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "annotations": {"pv.kubernetes.io/bind-completed": "true"}},
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeName": pv_name(namespace, claim),
        },
        "status": {"phase": "Bound"},
    }


def bound_csi_pv_manifest(namespace: str, claim: str) -> dict[str, Any]:
    """scheduler_perf's ``pv-csi.yaml`` with a ``claimRef`` to its claim and its name as the volume handle."""
    name = pv_name(namespace, claim)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {PV_NAMESPACE_LABEL: namespace}},
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "capacity": {"storage": "1Gi"},
            "csi": {"driver": CSI_DRIVER, "volumeHandle": name},
            "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace, "name": claim},
        },
        "status": {"phase": "Bound"},
    }


def csinode_manifest(index: int) -> dict[str, Any]:
    """The CSINode of a bench node: the CSI driver with scheduler_perf's attach limit (NodeVolumeLimits reads it)."""
    name = node_name(index)
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {"drivers": [{"name": CSI_DRIVER, "nodeID": name, "allocatable": {"count": CSI_NODE_LIMIT}}]},
    }


DRA_DRIVER = "gpu.bench.kopf-scheduler.dev"
DEVICE_CLASS = "bench-gpu"
DEVICES_PER_NODE = 8
DRA_API = "/apis/resource.k8s.io/v1"


def claim_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    """pod-default with its own ResourceClaim (named like the pod) for one device."""
    pod = base_pod(name, scheduler_name)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return pod


def device_class_manifest() -> dict[str, Any]:
    selector = {"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [selector]},
    }


def resource_slice_manifest(index: int) -> dict[str, Any]:
    node = node_name(index)
    devices = [{"name": f"gpu-{d}", "attributes": {"index": {"int": d}}} for d in range(DEVICES_PER_NODE)]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def resource_claim_manifest(namespace: str, name: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [request]}},
    }


@dataclass(frozen=True)
class Workload:
    id: str
    name: str
    nodes: int
    pods: int
    make_pod: Callable[[str, str], dict[str, Any]]
    description: str
    #: Each pod gets its own claim, pre-bound to its own CSI PV, and every node a CSINode (SchedulingCSIPVs).
    volumes: bool = False
    #: Every node starts with four low-priority pods bound to it (PreemptionAsync).
    full_nodes: bool = False
    #: Each pod gets its own ResourceClaim, every node a ResourceSlice of devices (SchedulingWithResourceClaims).
    claims: bool = False
    #: The pods are gangs of this many (a PodGroup each, minCount = the size); 0 = no gangs.
    gang_size: int = 0
    #: The gangs are scheduler-plugins' Coscheduling PodGroups (kopf-scheduler only: kube-scheduler has no such plugin).
    coscheduling: bool = False
    #: Each gang must lie inside one rack (PodGroup ``schedulingConstraints``; TopologyAwareWorkloadScheduling).
    topology: bool = False


#: The issue's workloads at their default sizes; ``BENCH_<ID>=NODESxPODS`` overrides one (ID upper-cased, - → _).
DEFAULT_WORKLOADS: tuple[Workload, ...] = (
    Workload("basic-1000", "SchedulingBasic", 1000, 10000, basic_pod, "pod-default (100m CPU, 500Mi)"),
    Workload("basic-5000", "SchedulingBasic", 5000, 10000, basic_pod, "pod-default (100m CPU, 500Mi)"),
    # scheduler_perf's 5000Nodes_50000Pods: does the cost per pod grow with the backlog?
    Workload("basic-5000-50000", "SchedulingBasic", 5000, 50000, basic_pod, "pod-default (100m CPU, 500Mi)"),
    Workload(
        "topology-spread",
        "PodTopologySpread",
        1000,
        5000,
        topology_spread_pod,
        "hard zone spread (3 zones, maxSkew 5, DoNotSchedule), pods select each other",
    ),
    Workload(
        "pod-affinity",
        "InterPodAffinity",
        500,
        2000,
        pod_affinity_pod,
        "preferred pod affinity to each other, topology hostname (weight 1)",
    ),
    Workload(
        "node-affinity",
        "NodeAffinity",
        1000,
        5000,
        node_affinity_pod,
        "preferred node affinity: zone-a weight 10, zone-b weight 5",
    ),
    Workload(
        "csi-pvs",
        "SchedulingCSIPVs",
        1000,
        2000,
        csi_pv_pod,
        f"pod-default with its own PVC, pre-bound (status Bound) to its own CSI PV ({CSI_DRIVER}); "
        f"every node a CSINode with a limit of {CSI_NODE_LIMIT} volumes",
        volumes=True,
    ),
    Workload(
        "preemption",
        "PreemptionAsync",
        1000,
        1000,
        preemption_pod,
        f"nodes full of low-priority pods (4 x 900m); every {PREEMPTOR_EVERY}th pending pod a 3-CPU preemptor "
        "of priority 10, the others pod-default",
        full_nodes=True,
    ),
    # scheduler_perf's PreemptionAsync 5000Nodes (20000 low-priority pods, 5000 measured): at 1000 pods a run
    # lasts ≈ 2–3 s, one or two throughput samples, so its ratio swings with where the ticks fall.
    Workload(
        "preemption-5000",
        "PreemptionAsync",
        5000,
        5000,
        preemption_pod,
        f"nodes full of low-priority pods (4 x 900m); every {PREEMPTOR_EVERY}th pending pod a 3-CPU preemptor "
        "of priority 10, the others pod-default",
        full_nodes=True,
    ),
    Workload(
        "claims",
        "SchedulingWithResourceClaims",
        1000,
        2000,
        claim_pod,
        f"pod-default with its own ResourceClaim for one device of a DeviceClass (CEL on the driver); every "
        f"node a ResourceSlice of {DEVICES_PER_NODE} devices",
        claims=True,
    ),
    # The issue's "1000 nodes, 500 gangs of 8": kube-scheduler with the four workload-aware gates on.
    Workload(
        "gangs",
        "GangScheduling",
        1000,
        500 * GANG_SIZE,
        gang_pod,
        f"gangs of {GANG_SIZE} pod-default pods, a PodGroup each (minCount {GANG_SIZE}); kube-scheduler with "
        "GenericWorkload, GangScheduling, TopologyAwareWorkloadScheduling and WorkloadAwarePreemption on",
        gang_size=GANG_SIZE,
    ),
    # The same gangs, each kept inside one rack of 50 nodes (20 racks): the placement extension points at work.
    Workload(
        "gangs-topology",
        "TopologyAwareGangs",
        1000,
        500 * GANG_SIZE,
        gang_pod,
        "the gangs above, each PodGroup's members inside one rack of 50 nodes (schedulingConstraints.topology); "
        "TopologyPlacementGenerator and PodGroupPodsCount on both sides",
        gang_size=GANG_SIZE,
        topology=True,
    ),
    # Issue 36: the same gangs as Coscheduling PodGroups, against the row above (kopf-scheduler only).
    Workload(
        "gangs-coscheduling",
        "Coscheduling",
        1000,
        500 * GANG_SIZE,
        coscheduling_gang_pod,
        f"the gangs above as scheduler-plugins' PodGroups (minMember {GANG_SIZE}) with Coscheduling; "
        "kopf-scheduler only",
        gang_size=GANG_SIZE,
        coscheduling=True,
    ),
)


# --------------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------------


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


@dataclass
class Config:
    """Every knob, from environment variables (defaults = what ``make bench`` runs).

    - ``BENCH_REPS`` (3): repetitions per workload and scheduler (kube-scheduler and kopf-scheduler take turns
      at running first: :func:`scheduler_order`).
    - ``BENCH_WORKLOADS`` (all): comma-separated workload ids to run.
    - ``BENCH_SCHEDULERS`` (kube-scheduler,kopf-scheduler,ceiling).
    - ``BENCH_<ID>`` (e.g. ``BENCH_BASIC_5000=5000x10000``): nodes x pods of one workload.
    - ``BENCH_SCALE`` (1.0): multiplies every pod count (quick development runs).
    - ``BENCH_STALL_SECONDS`` (120): give a run up when no pod was bound for this long.
    - ``BENCH_RESULTS_DIR`` (bench/results), ``BENCH_DOC`` (docs/benchmarks.md; empty = do not write).
    - ``BENCH_CEILING_CONCURRENCY`` (64): Bindings in flight in the ceiling binder.
    - ``BENCH_MERGE`` (unset): 1 = the workloads run now replace theirs in an existing ``e2e.json``, the
      others are kept (re-measuring one workload; the report says which were measured when).
    - ``BENCH_KOPF_SPEC`` (unset): the JSON spec of kopf-scheduler's SchedulerProfile (default ``{}``).
    - ``BENCH_PROFILE`` (unset): a ``py-spy`` executable; kopf-scheduler runs are then recorded with
      ``py-spy record --format raw`` (collapsed stacks) into ``<log dir>/profiles/``. Profiling slows
      the process down: never combine it with runs whose numbers are published.
    - ``BENCH_APISERVER_CPUS``, ``BENCH_SCHEDULER_CPUS`` (unset): CPUs as ``taskset -c`` names them (``0-1``):
      etcd and kube-apiserver pinned to the first, each scheduler under test (the ceiling too) to the second
      (``bench/_e2e_pinning.py``; recorded in the results' ``meta``). Unset, nothing is pinned.
    """

    reps: int = 3
    workloads: list[Workload] = field(default_factory=list)
    schedulers: list[str] = field(default_factory=lambda: [KUBE, KOPF, CEILING])
    stall_seconds: float = 120.0
    results_dir: Path = RESULTS_DIR
    doc_path: Path | None = DOC_PATH
    ceiling_concurrency: int = 64
    profiler: str = ""
    apiserver_cpus: frozenset[int] = frozenset()
    scheduler_cpus: frozenset[int] = frozenset()
    log_dir: Path = Path(tempfile.gettempdir())
    merge: bool = False

    @classmethod
    def from_env(cls) -> Config:
        scale = _env_float("BENCH_SCALE", 1.0)
        wanted = [w.strip() for w in os.environ.get("BENCH_WORKLOADS", "").split(",") if w.strip()]
        known = {w.id: w for w in DEFAULT_WORKLOADS}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise SystemExit(f"BENCH_WORKLOADS: unknown workload(s) {unknown}; known: {sorted(known)}")
        workloads = []
        for w in DEFAULT_WORKLOADS:
            if wanted and w.id not in wanted:
                continue
            nodes, pods = w.nodes, w.pods
            size = os.environ.get("BENCH_" + w.id.upper().replace("-", "_"))
            if size:
                n, _, p = size.lower().partition("x")
                nodes, pods = int(n), int(p)
            pods = max(1, round(pods * scale))
            workloads.append(dataclasses.replace(w, nodes=nodes, pods=pods))
        schedulers = [s.strip() for s in os.environ.get("BENCH_SCHEDULERS", "").split(",") if s.strip()]
        bad = [s for s in schedulers if s not in SCHEDULER_NAMES]
        if bad:
            raise SystemExit(f"BENCH_SCHEDULERS: unknown {bad}; known: {list(SCHEDULER_NAMES)}")
        doc = os.environ.get("BENCH_DOC")
        profiler = os.environ.get("BENCH_PROFILE", "")
        if profiler and shutil.which(profiler) is None:  # found out before the cluster is built, not after
            raise SystemExit(f"BENCH_PROFILE: {profiler!r} is not on PATH")
        return cls(
            reps=_env_int("BENCH_REPS", 3),
            workloads=workloads,
            schedulers=schedulers or [KUBE, KOPF, CEILING],
            stall_seconds=_env_float("BENCH_STALL_SECONDS", 120.0),
            results_dir=Path(os.environ.get("BENCH_RESULTS_DIR") or RESULTS_DIR),
            doc_path=DOC_PATH if doc is None else (Path(doc) if doc else None),
            ceiling_concurrency=_env_int("BENCH_CEILING_CONCURRENCY", 64),
            profiler=profiler,
            apiserver_cpus=parse_cpus(os.environ.get("BENCH_APISERVER_CPUS", "")),
            scheduler_cpus=parse_cpus(os.environ.get("BENCH_SCHEDULER_CPUS", "")),
            merge=os.environ.get("BENCH_MERGE", "") not in ("", "0"),
        )


# --------------------------------------------------------------------------------------------------------
# A small async API client (the harness's own; nothing here is the operator's code)
# --------------------------------------------------------------------------------------------------------


class Api:
    def __init__(self, cluster: LocalCluster) -> None:
        import ssl

        self.server = cluster.server
        ctx = ssl.create_default_context(cafile=str(cluster.ca_file))
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, limit=64),
            headers={"Authorization": f"Bearer {cluster.token}"},
            timeout=aiohttp.ClientTimeout(total=600),
        )

    async def close(self) -> None:
        await self.session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        ok404: bool = False,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(method, self.server + path, data=data, params=params, headers=headers) as r:
            text = await r.text()
            if r.status == 404 and ok404:
                return {}
            if r.status >= 400:
                raise RuntimeError(f"{method} {path}: HTTP {r.status}: {text[:500]}")
            return json.loads(text) if text else {}

    async def get_text(self, path: str) -> str:
        """A GET whose answer is not JSON (the API server's ``/metrics``)."""
        async with self.session.get(self.server + path) as r:
            if r.status >= 400:
                raise RuntimeError(f"GET {path}: HTTP {r.status}")
            return await r.text()

    async def create(self, path: str, body: dict[str, Any]) -> None:
        """POST with retries; an object that already exists (409) counts as created."""
        for attempt in range(5):
            try:
                await self.request("POST", path, body=body)
                return
            except RuntimeError as e:
                if "HTTP 409" in str(e):
                    return
                if attempt == 4:
                    raise
                await asyncio.sleep(0.2 * (attempt + 1))

    async def create_many(self, path: str, bodies: Sequence[dict[str, Any]], *, concurrency: int = 32) -> None:
        await for_each(bodies, lambda body: self.create(path, body), concurrency=concurrency)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> None:
        await self.request("PATCH", path, body=body, content_type="application/merge-patch+json")


async def for_each(items: Sequence[Any], action: Callable[[Any], Awaitable[None]], *, concurrency: int = 32) -> None:
    """``action`` on every item, ``concurrency`` at a time."""
    queue = list(reversed(items))

    async def worker() -> None:
        while queue:
            await action(queue.pop())

    await asyncio.gather(*(worker() for _ in range(concurrency)))


class PodWatch:
    """Watches one namespace's pods; records the receive time of each pod's creation and of its bind (pods
    created already bound are left out)."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.node_of: dict[str, str] = {}
        self.name_of: dict[str, str] = {}
        #: Pods that already had a node when first seen: not the scheduler's work.
        self.prebound: set[str] = set()
        #: Pods seen bound to a second node after their first (a double binding; must stay empty).
        self.rebound: dict[str, list[str]] = {}
        self._task: asyncio.Task[None] | None = None
        self._rv = ""

    async def start(self) -> None:
        page = await self.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods", params={"limit": "1"})
        self._rv = page["metadata"]["resourceVersion"]
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        while True:
            params = {
                "watch": "1",
                "resourceVersion": self._rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "3600",
            }
            timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
            async with self.api.session.get(self.api.server + path, params=params, timeout=timeout) as resp:
                resp.raise_for_status()
                async for line in resp.content:
                    now = time.monotonic()
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    meta = obj.get("metadata") or {}
                    if event.get("type") == "ERROR":
                        raise RuntimeError(f"watch error: {obj}")
                    self._rv = meta.get("resourceVersion") or self._rv
                    if event.get("type") not in ("ADDED", "MODIFIED"):
                        continue
                    uid = meta["uid"]
                    self.name_of.setdefault(uid, meta.get("name", ""))
                    node = (obj.get("spec") or {}).get("nodeName")
                    if uid not in self.created and (node or uid in self.prebound):
                        self.prebound.add(uid)  # created bound (PreemptionAsync's low-priority pods): not measured
                        continue
                    self.created.setdefault(uid, now)
                    if node and uid not in self.bound:
                        self.bound[uid] = now
                        self.node_of[uid] = node
                    elif node and node != self.node_of.get(uid):
                        self.rebound.setdefault(uid, [self.node_of.get(uid, "")]).append(node)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def check(self) -> None:
        """Re-raise a watch failure (a dead watch would otherwise look like a stalled scheduler)."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            self._task.result()


# --------------------------------------------------------------------------------------------------------
# The processes under test
# --------------------------------------------------------------------------------------------------------


def proc_stats(pid: int) -> tuple[float, float]:
    """(peak RSS in MiB from VmHWM, CPU seconds utime+stime) of a live process."""
    peak_kb = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                peak_kb = int(line.split()[1])
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # fields 14 and 15 of stat(5), counted after "(comm)"
    return peak_kb / 1024.0, cpu


def proc_rss_mb(pid: int) -> float | None:
    """Current RSS (VmRSS) in MiB, None if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def omitted_default_plugins() -> list[str]:
    """Upstream's default plugins kopf-scheduler does not implement: kube-scheduler's profile disables them."""
    from kopf_scheduler.framework.builder import DEFAULT_MULTI_POINT
    from kopf_scheduler.plugins.registry import default_registry

    registry = default_registry()
    return [name for name, _ in DEFAULT_MULTI_POINT if name not in registry]


def kube_scheduler_config(workload: Workload | None = None) -> dict[str, Any]:
    """kube-scheduler's configuration: its default profile minus what ours lacks; for gangs (run with the
    workload-aware gates) minus the TopologyAwareWorkloadScheduling plugins, which our gang profile lacks too
    (the topology-constrained gangs keep them, as our profile for them has them)."""
    disabled = omitted_default_plugins()
    if workload is not None and workload.gang_size and not workload.topology:
        disabled += KUBE_GATE_PLUGINS_NOT_IN_OUR_PROFILE
    return {
        "clientConnection": {"qps": 5000, "burst": 5000},
        "leaderElection": {"leaderElect": False},
        "profiles": [
            {
                "schedulerName": SCHEDULER_NAMES[KUBE],
                "plugins": {"multiPoint": {"disabled": [{"name": n} for n in disabled]}},
            }
        ],
    }


def ceiling_gang_args(workload: Workload | None) -> list[str]:
    """The ceiling's flags for a gang workload: a gang scheduler's writes (``--gangs``), each gang in one rack when
    the workload keeps gangs to racks."""
    if workload is None or not workload.gang_size:
        return []
    return ["--gangs", *(["--topology-key", RACK_KEY] if workload.topology else [])]


def scheduler_name(scheduler: str, workload: Workload) -> str:
    """The pods' ``schedulerName``: kopf-scheduler's gang workloads have their own SchedulerProfiles."""
    if scheduler == KOPF and workload.gang_size:
        if workload.topology:
            return KOPF_TOPOLOGY_GANG_PROFILE
        return KOPF_COSCHEDULING_PROFILE if workload.coscheduling else KOPF_GANG_PROFILE
    return SCHEDULER_NAMES[scheduler]


class Runner:
    """Starts and stops one scheduler under test; ``pid`` is the process measured."""

    def __init__(
        self,
        kind: str,
        cluster: LocalCluster,
        namespace: str,
        config: Config,
        log_dir: Path,
        workload: Workload | None = None,
    ) -> None:
        self.kind = kind
        self.workload = workload
        self.cluster = cluster
        self.namespace = namespace
        self.config = config
        self.log_dir = log_dir
        self.pid = 0
        self._operator: Any = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def start(self) -> None:
        if self.kind == KUBE:
            gangs = self.workload is not None and self.workload.gang_size
            component = self.cluster.start_kube_scheduler(
                kube_scheduler_config(self.workload), extra_args=[KUBE_GATES] if gangs else [], wait=False
            )
            self.pid = component.pid
        elif self.kind == KOPF:
            from tests.e2e.operator_process import OperatorProcess

            self._operator = OperatorProcess(
                self.cluster.kubeconfig, name=f"kopf-{self.namespace}", log_dir=self.log_dir
            )
            self._operator.start(wait=False)
            self.pid = self._operator.pid
        else:
            self._log = open(self.log_dir / f"ceiling-{self.namespace}.log", "ab")  # noqa: SIM115
            parent = os.getpid()
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench._e2e_ceiling",
                    "--kubeconfig",
                    str(self.cluster.kubeconfig),
                    "--namespace",
                    self.namespace,
                    "--scheduler-name",
                    SCHEDULER_NAMES[CEILING],
                    "--concurrency",
                    str(self.config.ceiling_concurrency),
                    *ceiling_gang_args(self.workload),
                ],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: _child_preexec(parent),
            )
            self.pid = self._process.pid

    @property
    def secure_port(self) -> int:
        """The port of the scheduler's HTTPS server (``/metrics``, ``/readyz``); 0 for the ceiling."""
        if self.kind == KUBE:
            component = self.cluster.components.get("kube-scheduler")
            return component.ports["secure"] if component is not None else 0
        return int(self._operator.metrics_port) if self.kind == KOPF and self._operator is not None else 0

    def alive(self) -> bool:
        if self.kind == KUBE:
            component = self.cluster.components.get("kube-scheduler")
            return component is not None and component.alive()
        if self.kind == KOPF:
            return bool(self._operator and self._operator.alive())
        return self._process is not None and self._process.poll() is None

    def log_tail(self) -> str:
        if self.kind == KUBE:
            return self.cluster.log_tails(30)
        if self.kind == KOPF and self._operator is not None:
            return str(self._operator.log_tail(30))
        path = self.log_dir / f"ceiling-{self.namespace}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        if self.kind == KUBE:
            if "kube-scheduler" in self.cluster.components:
                self.cluster.stop_component("kube-scheduler")
        elif self.kind == KOPF:
            if self._operator is not None:
                self._operator.stop()
        elif self._process is not None:
            if self._process.poll() is None:
                os.killpg(self._process.pid, signal.SIGTERM)
                try:
                    self._process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self._process.pid, signal.SIGKILL)
                    self._process.wait()
            if self._log is not None:
                self._log.close()


# --------------------------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------------------------


def load1() -> float:
    return os.getloadavg()[0]


def speed_probe_ms(rounds: int = 3, iterations: int = 300_000) -> float:
    """The median CPU milliseconds of a fixed pure-Python loop (≈ 20 ms here): how fast the machine is now."""
    times = []
    for _ in range(rounds):
        started = time.process_time()
        total = 0
        for i in range(iterations):
            total += i * i % 7
        times.append((time.process_time() - started) * 1000)
    return sorted(times)[len(times) // 2]


def node_name(index: int) -> str:
    return f"bench-node-{index:05d}"


def node_manifest(index: int) -> dict[str, Any]:
    name = node_name(index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                HOSTNAME_KEY: name,
                ZONE_KEY: ZONES[index % len(ZONES)],
                RACK_KEY: rack_of(index),
                REGION_KEY: "region-1",
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "spec": {},
        "status": {
            "capacity": dict(NODE_RESOURCES),
            "allocatable": dict(NODE_RESOURCES),
            "conditions": [{"type": "Ready", "status": "True", "reason": "BenchReady", "message": "plain node"}],
            "phase": "Running",
        },
    }


async def ensure_nodes(api: Api, have: int, want: int) -> int:
    if want > have:
        started = time.monotonic()
        await api.create_many("/api/v1/nodes", [node_manifest(i) for i in range(have, want)])
        print(f"  created nodes {have}..{want - 1} in {time.monotonic() - started:.1f}s", flush=True)
    return max(have, want)


async def delete_namespace_pods(api: Api, namespace: str, wait_seconds: float = 600.0) -> None:
    """Delete every pod (grace 0: there is no kubelet) and event of the namespace; wait until the pods are gone."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    await _delete_collection(api, path, params={"gracePeriodSeconds": "0"})
    await _delete_collection(api, f"/api/v1/namespaces/{namespace}/events")
    deadline = time.monotonic() + wait_seconds
    next_delete = time.monotonic() + 60
    while True:
        page = await api.request("GET", path, params={"limit": "1"})
        if not page.get("items"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods of {namespace} not gone after {wait_seconds:.0f}s")
        if time.monotonic() > next_delete:  # a cut-off DELETE may have stopped half-way
            await _delete_collection(api, path, params={"gracePeriodSeconds": "0"})
            next_delete = time.monotonic() + 60
        await asyncio.sleep(0.5)


async def _delete_collection(api: Api, path: str, params: dict[str, str] | None = None) -> None:
    """DELETE a collection. Its answer lists every deleted object; at 50000 pods the API server's request
    timeout can cut that answer off or answer 504 while the deletion goes on, so neither is an error here (the
    caller waits until the objects are gone)."""
    try:
        await api.request("DELETE", path, params=params, ok404=True)
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, TimeoutError) as e:
        print(f"  DELETE {path}: {type(e).__name__}; waiting for the objects to go", flush=True)
    except RuntimeError as e:
        if "HTTP 504" not in str(e):
            raise
        print(f"  DELETE {path}: HTTP 504; waiting for the objects to go", flush=True)


async def ensure_csinodes(api: Api, nodes: int) -> None:
    """A CSINode for each of the first ``nodes`` nodes (kept: CSINodes of nodes already created are skipped)."""
    await api.create_many("/apis/storage.k8s.io/v1/csinodes", [csinode_manifest(i) for i in range(nodes)])


async def ensure_devices(api: Api, nodes: int) -> None:
    """The DeviceClass and a ResourceSlice for each of the first ``nodes`` nodes (existing ones are kept)."""
    await api.create(f"{DRA_API}/deviceclasses", device_class_manifest())
    await api.create_many(f"{DRA_API}/resourceslices", [resource_slice_manifest(i) for i in range(nodes)])


async def delete_claims(api: Api, namespace: str, wait_seconds: float = 600.0) -> None:
    """Delete the run's ResourceClaims (their delete-protection finalizers dropped first: no controller here)."""
    path = f"{DRA_API}/namespaces/{namespace}/resourceclaims"
    listed = await api.request("GET", path)
    names = [item["metadata"]["name"] for item in listed.get("items") or []]

    async def unprotect(name: str) -> None:
        with contextlib.suppress(RuntimeError):  # already gone
            await api.merge_patch(f"{path}/{name}", {"metadata": {"finalizers": None}})

    await for_each(names, unprotect)
    await api.request("DELETE", path, ok404=True)
    deadline = time.monotonic() + wait_seconds
    while (await api.request("GET", path, params={"limit": "1"})).get("items"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"claims of {namespace} not gone after {wait_seconds:.0f}s")
        await asyncio.sleep(0.5)


async def create_bound_volume(api: Api, namespace: str, claim: str) -> None:
    """One claim and its PV, bound both ways, as scheduler_perf's CreatePodWithPersistentVolume does.

    Creating resets ``status``, so the Bound phases go through the status subresource afterwards. The claim
    comes first: the PV refers to it.
    """
    pvc = bound_pvc_manifest(namespace, claim)
    pv = bound_csi_pv_manifest(namespace, claim)
    claims = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"
    await api.create(claims, pvc)
    await api.merge_patch(f"{claims}/{claim}/status", {"status": pvc["status"]})
    await api.create("/api/v1/persistentvolumes", pv)
    await api.merge_patch(f"/api/v1/persistentvolumes/{pv['metadata']['name']}/status", {"status": pv["status"]})


async def delete_volumes(api: Api, namespace: str, wait_seconds: float = 600.0) -> None:
    """Delete the run's claims and PVs; wait until they are gone.

    The StorageObjectInUseProtection admission plugin puts a protection finalizer on every claim and PV, and
    no controller here removes it, so the harness drops the finalizers itself before deleting.
    """
    claims = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"
    pvs = "/api/v1/persistentvolumes"
    selector = {"labelSelector": f"{PV_NAMESPACE_LABEL}={namespace}"}
    for path, params, item_path in (
        (claims, None, lambda name: f"{claims}/{name}"),
        (pvs, selector, lambda name: f"{pvs}/{name}"),
    ):
        listed = await api.request("GET", path, params=params)
        names = [item["metadata"]["name"] for item in listed.get("items") or []]

        async def unprotect(name: str, item_path: Callable[[str], str] = item_path) -> None:
            with contextlib.suppress(RuntimeError):  # already gone
                await api.merge_patch(item_path(name), {"metadata": {"finalizers": None}})

        await for_each(names, unprotect)
        await api.request("DELETE", path, params=params, ok404=True)
    deadline = time.monotonic() + wait_seconds
    while True:
        left_claims = await api.request("GET", claims, params={"limit": "1"})
        left_pvs = await api.request("GET", pvs, params={**selector, "limit": "1"})
        if not left_claims.get("items") and not left_pvs.get("items"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"claims or PVs of {namespace} not gone after {wait_seconds:.0f}s")
        await asyncio.sleep(0.5)


async def fill_nodes(api: Api, namespace: str, nodes: int) -> None:
    """PreemptionAsync's init pods: four low-priority pods bound to each of the first ``nodes`` nodes."""
    await api.create("/apis/scheduling.k8s.io/v1/priorityclasses", HIGH_PRIORITY_CLASS)
    per_node = range(LOW_PRIORITY_PODS_PER_NODE)
    pods = [low_priority_pod(f"low-{i:05d}-{k}", node_name(i)) for i in range(nodes) for k in per_node]
    await api.create_many(f"/api/v1/namespaces/{namespace}/pods", pods)


async def create_pods(api: Api, workload: Workload, namespace: str, scheduler_name: str) -> None:
    """The run's pods, pending; with their bound claims and PVs first when the workload has volumes, and the
    nodes filled with bound low-priority pods first when it preempts."""
    names = [f"pod-{i:05d}" for i in range(workload.pods)]
    if workload.volumes:
        await for_each(names, lambda name: create_bound_volume(api, namespace, name))
    if workload.full_nodes:
        await fill_nodes(api, namespace, workload.nodes)
    if workload.claims:
        claims = [resource_claim_manifest(namespace, n) for n in names]
        await api.create_many(f"{DRA_API}/namespaces/{namespace}/resourceclaims", claims)
    if workload.gang_size:
        kinds = {"coscheduling": workload.coscheduling, "topology": workload.topology}
        await create_pod_groups(api, namespace, workload.pods, workload.gang_size, **kinds)
    await api.create_many(f"/api/v1/namespaces/{namespace}/pods", [workload.make_pod(n, scheduler_name) for n in names])


class RunHooks(Protocol):
    """What another benchmark adds to :func:`run_one` (``bench.scale``): its own pod creation (returning how
    many it made, which becomes the run's size), a look at the spawned scheduler, and fields for the row,
    gathered after the scheduler stopped and before the run's pods are deleted."""

    async def create_pods(self, api: Api, workload: Workload, namespace: str, scheduler_name: str) -> int: ...

    def spawned(self, runner: Runner, spawn: float) -> None: ...

    async def finished(self, api: Api, namespace: str, watch: PodWatch) -> dict[str, Any]: ...


async def run_one(
    api: Api,
    cluster: LocalCluster,
    config: Config,
    workload: Workload,
    scheduler: str,
    rep: int,
    log_dir: Path,
    hooks: RunHooks | None = None,
) -> tuple[dict[str, Any], list[tuple[float, int]]]:
    namespace = f"b-{workload.id}-{scheduler.split('-')[0]}-{rep}-{os.getpid() % 10000}"
    await api.request(
        "POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    watch = PodWatch(api, namespace)
    await watch.start()
    name = scheduler_name(scheduler, workload)
    started = time.monotonic()
    if hooks is None:
        await create_pods(api, workload, namespace, name)
    else:
        workload = dataclasses.replace(workload, pods=await hooks.create_pods(api, workload, namespace, name))
    while len(watch.created) < workload.pods:
        watch.check()
        await asyncio.sleep(0.05)
    created_s = time.monotonic() - started
    load_before = load1()
    speed_before = speed_probe_ms()
    runner = Runner(scheduler, cluster, namespace, config, log_dir, workload)
    requests_before = await scrape_requests(api.get_text)
    spawn = time.monotonic()
    runner.start()
    if config.scheduler_cpus:
        pin_process(runner.pid, config.scheduler_cpus)
    if hooks is not None:
        hooks.spawned(runner, spawn)
    profiler = _start_profiler(config, runner, namespace)
    sampler = ThroughputSampler()
    complete = False
    error = ""
    peak_rss = cpu = math.nan
    last_count, last_progress = 0, spawn
    rss_timeline: list[tuple[float, float]] = []
    api_requests: dict[str, int] = {}
    tick = 0
    try:
        while True:
            tick += 1
            await asyncio.sleep(max(0.0, spawn + tick - time.monotonic()))
            now = time.monotonic()
            watch.check()
            count = len(watch.bound)
            sampler.tick(now, count)
            rss = proc_rss_mb(runner.pid)
            if rss is not None:
                rss_timeline.append((round(now - spawn, 2), round(rss, 1)))
            if count > last_count:
                last_count, last_progress = count, now
            if count >= workload.pods:
                complete = True
                break
            if not runner.alive():
                error = f"{scheduler} exited\n{runner.log_tail()}"
                break
            if now - last_progress > config.stall_seconds:
                error = f"no bind for {config.stall_seconds:.0f}s ({count}/{workload.pods} bound)"
                break
        if runner.alive():
            peak_rss, cpu = proc_stats(runner.pid)
        api_requests = requests_between(requests_before, await scrape_requests(api.get_text))
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(timeout=60)
        runner.stop()
        await watch.stop()
    load_after = load1()
    speed_after = speed_probe_ms()
    if error:
        print(f"  !! {error}", flush=True)
    stats = sampler.summary()
    bind_times = sorted(watch.bound.values())
    latencies = latency_percentiles_ms(pod_latencies(watch.created, watch.bound, not_before=spawn))
    row = {
        "workload": workload.name,
        "workload_id": workload.id,
        "nodes": workload.nodes,
        "pods": workload.pods,
        "scheduler": scheduler,
        "rep": rep,
        "throughput_avg": stats["average"],
        "p50": stats["p50"],
        "p90": stats["p90"],
        "p99": stats["p99"],
        "latency_p50_ms": latencies["latency_p50_ms"],
        "latency_p99_ms": latencies["latency_p99_ms"],
        "peak_rss_mb": peak_rss,
        "cpu_s": cpu,
        "startup_s": (bind_times[0] - spawn) if bind_times else math.nan,
        "duration_s": (bind_times[-1] - bind_times[0]) if bind_times else math.nan,
        "bound": len(watch.bound),
        "complete": complete,
        "load1_before": round(load_before, 2),
        "load1_after": round(load_after, 2),
        "speed_probe_ms_before": round(speed_before, 1),
        "speed_probe_ms_after": round(speed_after, 1),
        "error": error.splitlines()[0] if error else "",
        "rss_timeline": rss_timeline,
        "api_writes_per_pod": writes_per_pod(api_requests, len(watch.bound)),
        "api_requests": api_requests,
    }
    if workload.gang_size:  # nothing lost: every gang bound whole
        row.update(gang_outcome(watch.name_of, watch.node_of, workload.gang_size))
        row["complete"] = complete and row["gangs_whole"] == row["gangs"]
        if workload.topology:
            row["complete"] = row["complete"] and row["gangs_across_racks"] == 0
    if hooks is not None:
        row.update(await hooks.finished(api, namespace, watch))
    timeline = _timeline(bind_times, spawn)
    await delete_namespace_pods(api, namespace, wait_seconds=max(600.0, workload.pods / 50))  # ≥ 50 deletions/s
    if workload.volumes:
        await delete_volumes(api, namespace)
    if workload.claims:
        await delete_claims(api, namespace)
    if workload.gang_size:
        await delete_pod_groups(api, namespace, for_each, coscheduling=workload.coscheduling)
    gangs = (
        f" | gangs whole {row['gangs_whole']}/{row['gangs']}, partial {row['gangs_partial']}, "
        f"across racks {row['gangs_across_racks']}"
        if workload.gang_size
        else ""
    )
    print(
        f"  {workload.id:16s} {scheduler:15s} rep {rep}: avg {row['throughput_avg']:7.1f} pods/s "
        f"p50 {row['p50']:7.1f} p99 {row['p99']:7.1f} | lat p50 {row['latency_p50_ms']:8.0f} ms "
        f"p99 {row['latency_p99_ms']:8.0f} ms | rss {peak_rss:6.0f} MiB cpu {cpu:6.1f} s | "
        f"startup {row['startup_s']:.1f}s | created in {created_s:.1f}s | load {load_before:.2f}{gangs} | "
        f"API writes/pod {row['api_writes_per_pod']}: {dict(list(api_requests.items())[:8])}",
        flush=True,
    )
    return row, timeline


def _start_profiler(config: Config, runner: Runner, namespace: str) -> subprocess.Popen[bytes] | None:
    if not config.profiler or runner.kind != KOPF:
        return None
    out = config.log_dir / "profiles"
    out.mkdir(parents=True, exist_ok=True)
    args = [config.profiler, "record", "--pid", str(runner.pid), "--rate", "200", "--format", "raw", "--nonblocking"]
    args += ["-o", str(out / f"{namespace}.txt")]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _timeline(bind_times: Sequence[float], origin: float, step: float = 0.25) -> list[tuple[float, int]]:
    """(seconds since spawn, pods bound) every ``step`` seconds, for the plot."""
    if not bind_times:
        return []
    out = [(0.0, 0)]
    index = 0
    t = step
    end = bind_times[-1] - origin + step
    while t <= end:
        while index < len(bind_times) and bind_times[index] - origin <= t:
            index += 1
        out.append((round(t, 3), index))
        t += step
    return out


# --------------------------------------------------------------------------------------------------------
# Environment facts
# --------------------------------------------------------------------------------------------------------


def _run_text(args: Sequence[str]) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=30, cwd=REPO_ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def pin_control_plane(cluster: LocalCluster, config: Config) -> dict[str, Any]:
    """Pin etcd and kube-apiserver to ``BENCH_APISERVER_CPUS``; the pinning, for the results' ``meta`` (nothing
    when neither side is pinned)."""
    if not (config.apiserver_cpus or config.scheduler_cpus):
        return {}
    if config.apiserver_cpus:
        for name in ("etcd", "kube-apiserver"):
            pin_process(cluster.components[name].pid, config.apiserver_cpus)
    pinning = {"apiserver_cpus": sorted(config.apiserver_cpus), "scheduler_cpus": sorted(config.scheduler_cpus)}
    print(f"cpu pinning: {pinning}", flush=True)
    return {"cpu_pinning": pinning}


def machine_facts() -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    import kopf

    from kopf_scheduler._version import __version__

    bin_dir = default_bin_dir()
    commit = _run_text(["git", "rev-parse", "--short", "HEAD"])
    dirty = bool(_run_text(["git", "status", "--porcelain", "--untracked-files=no", "operator"]))
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "kube_scheduler": _run_text([str(bin_dir / "kube-scheduler"), "--version"]),
        "kube_apiserver": _run_text([str(bin_dir / "kube-apiserver"), "--version"]),
        "etcd": _run_text([str(bin_dir / "etcd"), "--version"]).splitlines()[0:1],
        "kopf": kopf.__version__ if hasattr(kopf, "__version__") else _pip_version("kopf"),
        "kopf_scheduler": __version__,
        "aiohttp": aiohttp.__version__,
        "commit": commit + ("-dirty" if dirty else ""),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "omitted_plugins": omitted_default_plugins(),
    }


def _pip_version(name: str) -> str:
    from importlib.metadata import version

    try:
        return version(name)
    except Exception:
        return "?"


# --------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------


async def prepare_kopf(cluster: LocalCluster) -> None:
    """CRDs (SchedulerProfile, kopf peering) and the benchmark's SchedulerProfile: an empty spec, or the JSON of
    ``BENCH_KOPF_SPEC`` (e.g. ``{"explain": {"successes": true}}`` to measure what keeping accounts costs)."""
    from tests.e2e.operator_process import apply_crds, create_profile, ensure_peering

    api = cluster.api_client()
    try:
        apply_crds(api)
        ensure_peering(api, "kopf-scheduler")
        spec = json.loads(os.environ.get("BENCH_KOPF_SPEC") or "{}")
        create_profile(api, SCHEDULER_NAMES[KOPF], spec)
        create_profile(api, KOPF_GANG_PROFILE, {**spec, **KOPF_GANG_SPEC})
        create_profile(api, KOPF_TOPOLOGY_GANG_PROFILE, {**spec, **KOPF_TOPOLOGY_GANG_SPEC})
        create_profile(api, KOPF_COSCHEDULING_PROFILE, {**spec, **KOPF_COSCHEDULING_SPEC})
        apply_crds(api, COSCHEDULING_CRD.parent)  # before the operator starts: its discovery finds the API
    finally:
        api.close()


def compile_operator_bytecode() -> None:
    """Compile the operator package's ``.pyc`` files before the runs, as the image has them from its build.

    Under ``PYTHONDONTWRITEBYTECODE`` (set on some machines; the image sets it too, its files compiled by pip) a process
    started from a source tree compiles every module it imports on every start, never caching: ≈ 0.15–0.2 s of
    our start-up (docs/benchmarks.md) that kube-scheduler's binary does not pay and an installed operator does not
    either. ``py_compile`` writes the cache whatever that variable says; the process then reads it."""
    import compileall

    import kopf_scheduler

    compileall.compile_dir(Path(kopf_scheduler.__file__).parent, quiet=1)


async def run_all(config: Config) -> dict[str, Any]:
    facts = machine_facts()
    print(
        f"machine: {facts['nproc']} cpus ({facts['cpu_model']}), {facts['ram_gib']} GiB; load {load1():.2f}", flush=True
    )
    # Logs of the schedulers under test (and py-spy profiles) stay out of the tree; kept for post-mortems.
    log_dir = Path(tempfile.mkdtemp(prefix="kopf-scheduler-bench-"))
    config.log_dir = log_dir
    print(f"logs: {log_dir}", flush=True)
    if KOPF in config.schedulers:
        compile_operator_bytecode()
    rows: list[dict[str, Any]] = []
    timelines: dict[str, list[tuple[float, int]]] = {}
    started = time.monotonic()
    cluster = LocalCluster("light", unlimited=True, apiserver_args=["--delete-collection-workers=4", "--event-ttl=10m"])
    with cluster:
        facts.update(pin_control_plane(cluster, config))
        api = Api(cluster)
        try:
            if KOPF in config.schedulers:
                await prepare_kopf(cluster)
            nodes = 0
            for workload in sorted(config.workloads, key=lambda w: w.nodes):
                nodes = await ensure_nodes(api, nodes, workload.nodes)
                if workload.volumes:
                    await ensure_csinodes(api, workload.nodes)
                if workload.claims:
                    await ensure_devices(api, workload.nodes)
                print(f"{workload.id}: {workload.name}, {workload.nodes} nodes, {workload.pods} pods", flush=True)
                for rep in range(1, config.reps + 1):
                    for scheduler in scheduler_order(config.schedulers, rep):
                        if workload.coscheduling and scheduler != KOPF:
                            continue  # scheduler-plugins' Coscheduling: kopf-scheduler only
                        row, timeline = await run_one(api, cluster, config, workload, scheduler, rep, log_dir)
                        rows.append(row)
                        timelines[f"{workload.id}/{scheduler}/{rep}"] = timeline
        finally:
            await api.close()
    facts["runtime_s"] = round(time.monotonic() - started, 1)
    return {"meta": facts, "rows": rows, "summary": summarize(rows), "timelines": timelines}


def scheduler_order(schedulers: Sequence[str], rep: int) -> list[str]:
    """The order of the schedulers in repetition ``rep``: kube-scheduler and kopf-scheduler swap places every
    other repetition, so neither always runs right after the API server has deleted the other's pods (the
    ceiling keeps its place)."""
    order = list(schedulers)
    if rep % 2 == 0 and KUBE in order and KOPF in order:
        i, j = order.index(KUBE), order.index(KOPF)
        order[i], order[j] = order[j], order[i]
    return order


def _clean(value: Any) -> Any:
    """NaN → None so the JSON is standard."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _unclean_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row read back from e2e.json: the None that :func:`_clean` wrote for NaN is NaN again (a run without a
    throughput, e.g. the ceiling's PreemptionAsync, which it cannot preempt), as the statistics expect."""
    return {key: math.nan if value is None else value for key, value in row.items()}


def merge_results(previous: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    from bench._e2e_report import measured_at

    """``new``'s workloads replace the same workloads in ``previous``; the others are kept as they were.

    For re-measuring one workload (e.g. when the shared machine was busy during it) without re-running all.
    """
    rerun = {r["workload_id"] for r in new["rows"]}
    rows: list[dict[str, Any]] = []
    inserted: set[str] = set()
    for row in map(_unclean_row, previous["rows"]):
        wid = row["workload_id"]
        if wid not in rerun:
            rows.append(row)
        elif wid not in inserted:
            rows.extend(r for r in new["rows"] if r["workload_id"] == wid)
            inserted.add(wid)
    rows.extend(r for r in new["rows"] if r["workload_id"] not in inserted)
    timelines = {k: v for k, v in previous.get("timelines", {}).items() if k.split("/")[0] not in rerun}
    timelines.update(new["timelines"])
    meta = dict(new["meta"])
    meta.pop("merged", None)  # the old single "kept" record (one commit for all kept workloads) is superseded
    measured = {wid: measured_at(new["meta"], wid) for wid in rerun}
    for wid in sorted({r["workload_id"] for r in rows} - rerun):
        measured[wid] = measured_at(previous["meta"], wid)
    meta["measured"] = measured
    return {"meta": meta, "rows": rows, "summary": summarize(rows), "timelines": timelines}


def main(argv: Sequence[str] | None = None) -> int:
    config = Config.from_env()
    config.results_dir.mkdir(parents=True, exist_ok=True)
    with refuse_if_busy("bench.e2e"):
        results = asyncio.run(run_all(config))
    out = config.results_dir / "e2e.json"
    if config.merge and out.exists():
        results = merge_results(json.loads(out.read_text()), results)
    out.write_text(json.dumps(_clean(results), indent=1) + "\n")
    print(f"wrote {out}", flush=True)
    from bench._e2e_report import plot, write_doc_section

    png = plot(results, config.results_dir / "e2e-bound-over-time.png")
    print(f"wrote {png}", flush=True)
    if config.doc_path is not None:
        write_doc_section(results, config.doc_path, png)
        print(f"wrote {config.doc_path}", flush=True)
    print(f"total runtime {results['meta']['runtime_s']:.0f}s", flush=True)
    return 0 if all(r["complete"] for r in results["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
