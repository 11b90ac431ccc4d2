"""Differential runs: the same pods, on the same cluster state, scheduled by upstream and by kopf-scheduler.

One :class:`Harness` owns a light local control plane (etcd + kube-apiserver: nothing else mutates
objects, so the state is exactly what we load), upstream kube-scheduler with one profile per compared
profile (named ``upstream-<name>``), and ``kopf-scheduler run`` as a real process hosting the same
profiles as SchedulerProfiles. Both schedulers run all the time; a pod goes to one or the other by its
``schedulerName``.

Fairness: both must decide pod *i* on the same state, and a binding cannot be undone. So upstream never
binds: it runs with its own ServiceAccount, and a ValidatingAdmissionPolicy denies that account's
``pods/binding`` requests with a message naming the node it chose. Upstream's decision (and, from its log,
the per-plugin and total scores of that cycle) is complete at that point; the failed bind only makes it
forget the assumed pod. Nor does it write volume bindings (VolumeBinding's PreBind): a second policy denies
its PV and claim updates, the node comes from the nomination it sets before PreBind, and on our side the
harness stands in for the PV controller (see :mod:`tests.conformance.volume_harness`). Nor does it preempt:
a webhook refuses its victims' DisruptionTarget patches as NotFound and a policy denies its pod deletes; the
nominated node is in the pod's status, the victims in its log (see :mod:`tests.conformance.preemption_harness`).
Per pending pod:

1. upstream's copy is created; upstream decides; we record its verdict (the node from the denied binding,
   or the FailedScheduling note, PodScheduled message, and any nomination with its victims), then delete
   the copy. It was never bound and preempted nobody, so nobody's cache ever counted it;
2. our copy (same name, same spec but ``schedulerName``) is created on the very same state; the operator
   decides; we record the same things. If it preempts, its victims really go and it binds after them: we
   follow it to that binding (its first verdict, the unschedulable one, is what is compared);
3. if ours is bound it stays: both schedulers see it for pod *i+1* (upstream's cache is fed by informer
   handlers on their own goroutines, so we wait for upstream's ``eventhandlers.go`` log line saying its
   cache took the pod, and its victims' deletions); if not, it is deleted, so a later pod cannot make it
   schedulable. A bound pod gets a start time from the kubelet stand-in (preemption's tie-breaks read it).

The operator's own bindings are in its cache the moment it assumes them, so it needs no such wait; that
it sees each scenario's nodes and existing pods is checked by a probe pod (``0/N nodes are available``)
before the first pending pod. The in-process model (:mod:`tests.conformance.sim`) tells an operator-side
state problem from a plugin difference.

Per pod we compare: bound or not; the FailedScheduling note and the PodScheduled message, byte for byte;
whether our node is among upstream's highest-total nodes; for a preempting pod, the nominated node and the
victims (start times make upstream's choice deterministic, so no tie set is needed); and that ours binds on
its nominated node once its victims are gone.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework.builder import resolve_profile
from kopf_scheduler.plugins.registry import default_registry
from tests.conformance.allocations import expected_record, record_of, record_problems, upstream_static_bindings
from tests.conformance.big_clusters import (
    BIG_THRESHOLD,
    CREATE_THREADS,
    RESET_NODE,
    create_nodes,
    reset_node,
    sampling_problems,
)
from tests.conformance.coverage import not_for_a_scheduler
from tests.conformance.devices import (
    CLAIMS_DENIED_MARKER,
    DEVICE_KINDS,
    allocated_devices,
    asks_for_extended_devices,
    compared_claims,
    create_device_object,
    delete_devices,
    delete_owned_extended_claims,
    denied_devices,
    extended_claim_name,
    no_claim_writes_policy,
    pod_claim_names,
    read_claim,
    upstream_claim_lines,
)
from tests.conformance.extender_harness import split_extenders
from tests.conformance.features import pod_uses
from tests.conformance.generator import (
    BIND_ANNOTATION,
    HOLD_FINALIZER,
    LIFECYCLE_ANNOTATION,
    NOBODY,
    PRIORITY_CLASSES,
    RUNTIME_CLASS,
    RUNTIME_CLASS_OVERHEAD,
    SUCCEEDED,
    TERMINATING,
    Scenario,
    with_scheduler,
)
from tests.conformance.known import scenario_hints
from tests.conformance.oracle import (
    LOG_FLAGS,
    LogCursor,
    UpstreamCycle,
    parse_cycle,
    parse_line,
    plugins_in_message,
    scheduler_config,
    upstream_profile,
    varying_plugins,
)
from tests.conformance.preemption_harness import (
    PodWatch,
    PreemptionWebhook,
    no_pod_deletes_policy,
    start_time_patch,
)
from tests.conformance.preemptions import NEVER_CLASS, NEVER_CLASS_VALUE, PREEMPTION
from tests.conformance.sim import Model, ModelVerdict
from tests.conformance.volume_harness import (
    DENIED_MARKER,
    STORAGE_KINDS,
    complete_bindings,
    create_storage,
    delete_storage,
    no_volume_writes_policy,
    read_storage,
)
from tests.e2e.operator_process import OperatorProcess, apply_crds, create_profile, wait_profile_status
from tools.localcluster import LocalCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = REPO_ROOT / "examples"
#: Upstream's cache handlers and binder (V3) and per-node scores (V10), and nothing else verbose.
UPSTREAM_FLAGS = (
    *LOG_FLAGS[:1],
    f"{LOG_FLAGS[1]},eventhandlers=4,default_binder=3,batch=3,allocateddevices=6,binder=5",
)

#: The identity upstream kube-scheduler runs as, and the policy that keeps it from binding.
UPSTREAM_ACCOUNT = ("default", "conformance-upstream")
UPSTREAM_USER = f"system:serviceaccount:{UPSTREAM_ACCOUNT[0]}:{UPSTREAM_ACCOUNT[1]}"
NO_BINDING_POLICY = "conformance-upstream-never-binds"
_CHOSE = re.compile(r"conformance: upstream chose (\S+)")

PROBE_LABEL = "conformance.kopf-scheduler.io/probe"
DECISION_TIMEOUT = 30.0
#: Pods no scheduler may act on (gated, or with ``spec.nodeName`` preset): how long both get to leave them alone.
UNTOUCHED_GRACE = 3.0
#: How long ours's Scheduled event may take to appear after the binding (the recorder is asynchronous).
RECORD_TIMEOUT = 5.0
ASSIGNED, WAITING = "assigned", "waiting"
UNTOUCHED_KINDS = ("gated", ASSIGNED, WAITING)
#: The plugin that keeps an untouched pod out of the scheduling queue (PreEnqueue), by kind.
_HELD_BY = {"gated": "SchedulingGates", WAITING: "DynamicResources"}
UPSTREAM_BACKOFF_SECONDS = 60
#: Upstream's log lines that end a cycle which searched the nodes (bound, or unschedulable).
UPSTREAM_CYCLE_ENDS = ("Attempting to bind pod to node", "Unable to schedule pod; no fit; waiting")
#: How long our preempting pod may take to bind once nominated (its victims must go first).
PREEMPTION_TIMEOUT = 20.0
POLL = 0.02

Log = Callable[[str], None]


# -- profiles ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProfileDef:
    """A compared profile: our SchedulerProfile ``name``/``spec`` and where it came from."""

    name: str
    spec: Mapping[str, Any]
    source: str
    #: Upstream's spec when it should differ on purpose (the quick test's negative control); None = ``spec``.
    upstream_spec: Mapping[str, Any] | None = None

    @property
    def upstream_name(self) -> str:
        return f"upstream-{self.name}"

    @property
    def omitted(self) -> tuple[str, ...]:
        """The upstream defaults our builder leaves out of this profile (upstream disables them too)."""
        spec = SchedulerProfileSpec.model_validate(dict(self.spec))
        return tuple(resolve_profile(self.name, spec, default_registry()).omitted_defaults)

    def upstream(self) -> dict[str, Any]:
        """Upstream's profile; ``spec.extenders`` is not a profile field there (see :meth:`extenders`)."""
        spec = self.spec if self.upstream_spec is None else self.upstream_spec
        return upstream_profile(self.upstream_name, split_extenders(spec)[0], self.omitted)

    @property
    def extenders(self) -> list[Any]:
        """Our ``spec.extenders``, which upstream gets at the top of its configuration (extender_harness.py)."""
        return split_extenders(self.spec)[1]


DEFAULT_PROFILE = ProfileDef("conformance-default", {}, "built-in: upstream's default profile")
#: Profiles that turn the plugins' args and weights away from the defaults (what examples may not cover).
#: ``conformance-no-spread`` drops PodTopologySpread, which makes pods "signable" for upstream's opportunistic
#: batching (beta, on in 1.36): with System default constraints no pod ever is.
ARGS_PROFILES = (
    ProfileDef(
        "conformance-no-spread",
        {"plugins": {"multiPoint": {"disabled": [{"name": "PodTopologySpread"}]}}},
        "built-in: the default profile without PodTopologySpread",
    ),
    ProfileDef(
        "conformance-args-a",
        {
            "plugins": {
                "score": {"enabled": [{"name": "NodeAffinity", "weight": 5}, {"name": "ImageLocality", "weight": 3}]}
            },
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "scoringStrategy": {
                            "type": "RequestedToCapacityRatio",
                            "resources": [
                                {"name": "cpu", "weight": 2},
                                {"name": "memory", "weight": 1},
                                {"name": "example.com/gpu", "weight": 3},
                            ],
                            "requestedToCapacityRatio": {
                                "shape": [
                                    {"utilization": 0, "score": 0},
                                    {"utilization": 50, "score": 10},
                                    {"utilization": 100, "score": 3},
                                ]
                            },
                        }
                    },
                },
                {"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 7}},
                {
                    "name": "NodeAffinity",
                    "args": {
                        "addedAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 20,
                                    "preference": {
                                        "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]
                                    },
                                }
                            ]
                        }
                    },
                },
                {
                    "name": "PodTopologySpread",
                    "args": {
                        "defaultingType": "List",
                        "defaultConstraints": [
                            {
                                "maxSkew": 2,
                                "topologyKey": "kubernetes.io/hostname",
                                "whenUnsatisfiable": "ScheduleAnyway",
                            },
                            {
                                "maxSkew": 1,
                                "topologyKey": "topology.kubernetes.io/region",
                                "whenUnsatisfiable": "DoNotSchedule",
                            },
                        ],
                    },
                },
                {
                    "name": "NodeResourcesBalancedAllocation",
                    "args": {
                        "resources": [
                            {"name": "cpu", "weight": 1},
                            {"name": "memory", "weight": 1},
                            {"name": "example.com/gpu", "weight": 1},
                        ]
                    },
                },
            ],
        },
        "built-in: non-default args of every plugin that has args",
    ),
    ProfileDef(
        "conformance-args-b",
        {
            "plugins": {
                "score": {
                    "disabled": [{"name": "TaintToleration"}],
                    "enabled": [{"name": "InterPodAffinity", "weight": 10}],
                },
                "filter": {"disabled": [{"name": "NodePorts"}]},
            },
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "ignoredResources": ["example.com/gpu"],
                        "scoringStrategy": {
                            "type": "MostAllocated",
                            "resources": [
                                {"name": "cpu", "weight": 1},
                                {"name": "memory", "weight": 3},
                                {"name": "hugepages-2Mi", "weight": 2},
                            ],
                        },
                    },
                },
                {"name": "InterPodAffinity", "args": {"ignorePreferredTermsOfExistingPods": True}},
                {
                    "name": "NodeAffinity",
                    "args": {
                        "addedAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["3"]}]}
                                ]
                            }
                        }
                    },
                },
            ],
        },
        "built-in: ignored resources, disabled filter and score plugins, required addedAffinity",
    ),
)


#: Plugins of scheduler-plugins, not of kube-scheduler: an example profile enabling one has no upstream to compare
#: with (kube-scheduler refuses the unknown name, and a QueueSort of its own would differ from every other
#: profile's, which kube-scheduler refuses too); scheduler-plugins' own tests are restated in the unit tests.
NOT_IN_KUBE_SCHEDULER = frozenset({"Coscheduling"})


def _enables_plugins_outside_kube_scheduler(spec: Mapping[str, Any]) -> bool:
    points = (spec.get("plugins") or {}).values()
    return any(
        plugin.get("name") in NOT_IN_KUBE_SCHEDULER for point in points for plugin in (point or {}).get("enabled") or []
    )


def example_profiles(root: Path = EXAMPLES_DIR) -> list[ProfileDef]:
    """Every SchedulerProfile in ``examples/**/*.yaml`` (multi-document files included), sorted by path; but those
    that enable a plugin kube-scheduler does not have (:data:`NOT_IN_KUBE_SCHEDULER`)."""
    found: list[ProfileDef] = []
    if not root.is_dir():
        return found
    for path in sorted(root.rglob("*.yaml")):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue
        for doc in docs:
            if (
                isinstance(doc, dict)
                and doc.get("kind") == "SchedulerProfile"
                and "kopf-scheduler.io/" in str(doc.get("apiVersion", ""))
            ):
                name = str((doc.get("metadata") or {}).get("name") or "")
                if name and not _enables_plugins_outside_kube_scheduler(dict(doc.get("spec") or {})):
                    found.append(ProfileDef(name, dict(doc.get("spec") or {}), str(path.relative_to(root.parent))))
    return found


def default_profiles(include_examples: bool = True) -> list[ProfileDef]:
    """The examples' profiles, the built-in default one (unless an example has an empty spec), the args ones."""
    examples = example_profiles() if include_examples else []
    builtin = [DEFAULT_PROFILE] if not any(not p.spec for p in examples) else []
    profiles: list[ProfileDef] = []
    seen: set[str] = set()
    for profile in (*examples, *builtin, *ARGS_PROFILES):
        if profile.name not in seen:
            profiles.append(profile)
            seen.add(profile.name)
    return profiles


# -- results ----------------------------------------------------------------------------------------------
@dataclass
class Decision:
    """One scheduler's verdict on one copy of a pod."""

    kind: str  # bound | unschedulable | error | timeout | invalid | gated | assigned (nodeName preset) | waiting
    node: str | None = None
    note: str | None = None  # the FailedScheduling event's note
    condition: str | None = None  # the PodScheduled=False condition's message
    detail: str = ""
    #: Preemption: the node the unschedulable pod was nominated for, and the victims ("ns/name", sorted) it
    #: preempted through the API (upstream: the DisruptionTarget patches the harness refused; ours: the pods
    #: our operator disrupted or deleted). Victims already terminating need no API call: upstream lists them.
    nominated: str | None = None
    victims: list[str] = field(default_factory=list)
    terminating_victims: list[str] = field(default_factory=list)
    #: Ours only: where the preempting pod was bound once its victims were gone (None: not within the timeout).
    final_node: str | None = None
    #: DRA: the devices allocated to the pod's claims, ``request=pool/device`` sorted (upstream: what its denied
    #: PreBind tried to write; ours: what the claims say after binding). None: no claims or nothing known.
    devices: list[str] | None = None
    #: VolumeBinding's static bindings, claim ``ns/name`` → PV (upstream: its Reserve's log; ours: the claims
    #: once bound). None: upstream bound no claim statically (allocations.py).
    volumes: dict[str, str] | None = None


@dataclass
class PodResult:
    seed: int
    profile: str
    index: int
    name: str
    namespace: str
    features: list[str]
    #: Plugins the pod exercised: its spec uses them, or they were decisive.
    plugins: list[str]
    upstream: Decision
    ours: Decision
    upstream_top: list[str] = field(default_factory=list)
    #: Upstream took an opportunistic-batching hint (no scoring): its top set is that node alone.
    upstream_hint: str | None = None
    #: ... and ours differed from the hint but our model's full ranking ties the two (the set was widened).
    hint_tie: bool = False
    upstream_scores: dict[str, int] = field(default_factory=dict)
    upstream_plugin_scores: dict[str, dict[str, int]] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    #: Plugins that demonstrably decided something for this pod (rejected a node, or ranked nodes apart).
    decisive: list[str] = field(default_factory=list)
    #: Facts about the scenario that known disagreements depend on (``known.scenario_hints``).
    hints: list[str] = field(default_factory=list)
    #: The report's features the pod uses (``features.pod_uses``: gates, claims, spreads...), from its scenario.
    uses: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    model_notes: list[str] = field(default_factory=list)
    known: str | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    #: Relevant nodes and the pods on them at decision time (for reproducers), only for disagreements.
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def agree(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ScenarioResult:
    seed: int
    size: str
    profile: str
    nodes: int
    existing_pods: int
    pods: list[PodResult]
    seconds: float
    invalid: list[str] = field(default_factory=list)


# -- raw API helpers --------------------------------------------------------------------------------------
def _raw(response: Any) -> dict[str, Any]:
    return json.loads(response.data)  # type: ignore[no-any-return]


def _clean(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object without server-set noise, for reproducers."""
    out = json.loads(json.dumps(obj))
    meta = out.get("metadata") or {}
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
        meta.pop(key, None)
    if out.get("kind") == "Pod":
        out.pop("status", None)
        spec = out.get("spec") or {}
        for key in ("dnsPolicy", "restartPolicy", "securityContext", "enableServiceLinks", "preemptionPolicy"):
            spec.pop(key, None)
        spec.pop("schedulerName", None)
        for container in (*spec.get("containers", ()), *spec.get("initContainers", ())):
            for key in ("terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy"):
                container.pop(key, None)
    if out.get("kind") == "Node":
        status = out.get("status") or {}
        out["status"] = {k: status[k] for k in ("allocatable", "images") if k in status}
    return out


class Harness:
    """The control plane, both schedulers and the compared profiles; :meth:`run_scenario` does the work."""

    def __init__(
        self,
        profiles: Sequence[ProfileDef],
        *,
        work_dir: Path | None = None,
        log: Log = print,
        operator_args: Sequence[str] = (),
    ) -> None:
        if not profiles:
            raise ValueError("no profiles to compare")
        self.profiles = {p.name: p for p in profiles}
        self.work_dir = work_dir
        self.log = log
        #: More ``kopf-scheduler run`` flags (e.g. ``--log-level debug`` to diagnose a disagreement).
        self.operator_args = tuple(operator_args)
        self.cluster: LocalCluster | None = None
        self.operator: OperatorProcess | None = None
        self.upstream_log: LogCursor | None = None
        self.nominations: PodWatch | None = None
        self.webhook: PreemptionWebhook | None = None
        #: The scenario being run (its PVs are the ones the PV controller stand-in completes).
        self._scenario: Scenario | None = None
        #: How many pods the kubelet stand-in has started (each gets the next start time).
        self._started = 0
        #: "ns/name" → the pod as last loaded into the model (to remove our victims from it).
        self._loaded: dict[str, dict[str, Any]] = {}
        #: Claims (ns/name) ours allocated in this scenario: a shared one is not allocated (nor logged) again.
        self._allocated_claims: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> Harness:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        started = time.monotonic()
        cluster_dir = self.work_dir / "cluster" if self.work_dir else None
        self.cluster = LocalCluster("light", work_dir=cluster_dir).start()
        self.api = self.cluster.api_client()
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        apply_crds(self.api)
        classes = {name: (value, "PreemptLowerPriority") for name, value in PRIORITY_CLASSES.items()}
        classes[NEVER_CLASS] = (NEVER_CLASS_VALUE, "Never")
        for name, (value, policy) in classes.items():
            body = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "preemptionPolicy": policy,
            }
            self._create_ignoring_conflict(lambda b=body: client.SchedulingV1Api(self.api).create_priority_class(b))
        runtime_class = {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": RUNTIME_CLASS},
            "handler": "runc",
            "overhead": {"podFixed": dict(RUNTIME_CLASS_OVERHEAD)},
        }
        self._create_ignoring_conflict(lambda: client.NodeV1Api(self.api).create_runtime_class(runtime_class))
        config = scheduler_config((p.upstream() for p in self.profiles.values()), parallelism=1)
        # Upstream's copies are refused their binding (an error: backoff, then a retry) until the harness deletes
        # them. A retry is a cycle that moves upstream's node-search start index (big_clusters.py): keep it later
        # than any deletion. Only retries wait; every compared verdict is a first attempt.
        config["podInitialBackoffSeconds"] = UPSTREAM_BACKOFF_SECONDS
        config["podMaxBackoffSeconds"] = 2 * UPSTREAM_BACKOFF_SECONDS
        extenders = {json.dumps(p.extenders, sort_keys=True) for p in self.profiles.values()}
        if len(extenders) > 1:
            raise ValueError("upstream configures extenders for all its profiles: compared profiles must agree")
        if extenders != {"[]"}:
            config["extenders"] = json.loads(extenders.pop())
        config["clientConnection"] = {"kubeconfig": str(self._upstream_kubeconfig())}
        self._install_no_binding_policy()
        self._install_no_preemption_webhook()
        self.nominations = PodWatch(self.cluster.api_client()).start()
        component = self.cluster.start_kube_scheduler(config, extra_args=UPSTREAM_FLAGS)
        self.upstream_log = LogCursor(component.log_path)
        self._check_no_binding()
        log_dir = (self.work_dir / "logs") if self.work_dir else self.cluster.work_dir / "logs"
        self.operator = OperatorProcess(
            self.cluster.kubeconfig,
            peering_name="conformance",
            log_dir=log_dir,
            name="kopf-scheduler",
            extra_args=self.operator_args,
        ).start()
        for profile in self.profiles.values():
            create_profile(self.api, profile.name, profile.spec)
        for profile in self.profiles.values():
            wait_profile_status(self.api, profile.name, ready=True, timeout=60)
        self.log(
            f"harness ready in {time.monotonic() - started:.1f}s: profiles {', '.join(self.profiles)}; "
            f"upstream log {component.log_path}; operator log {self.operator.log_path}"
        )

    def stop(self) -> None:
        if self.nominations is not None:
            self.nominations.stop()
            self.nominations = None
        if self.webhook is not None:
            self.webhook.stop()
            self.webhook = None
        if self.operator is not None:
            self.operator.stop()
            self.operator = None
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    def _upstream_kubeconfig(self) -> Path:
        """A kubeconfig for upstream's own ServiceAccount (cluster-admin), so the policy can tell it apart."""
        assert self.cluster is not None
        namespace, name = UPSTREAM_ACCOUNT
        self._create_ignoring_conflict(
            lambda: self.core.create_namespaced_service_account(
                namespace, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
            )
        )
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
        self._create_ignoring_conflict(
            lambda: client.RbacAuthorizationV1Api(self.api).create_cluster_role_binding(binding)
        )
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 86400},
        }
        token = _raw(
            self.core.create_namespaced_service_account_token(name, namespace, request, _preload_content=False)
        )["status"]["token"]
        kubeconfig = yaml.safe_load(self.cluster.kubeconfig.read_text())
        kubeconfig["users"] = [{"name": kubeconfig["users"][0]["name"], "user": {"token": token}}]
        path = self.cluster.work_dir / "upstream-scheduler.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        path.chmod(0o600)
        return path

    def _install_no_binding_policy(self) -> None:
        admission = client.AdmissionregistrationV1Api(self.api)
        policy = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": NO_BINDING_POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": f"request.userInfo.username != '{UPSTREAM_USER}'",
                        "messageExpression": "'conformance: upstream chose ' + object.target.name",
                    }
                ],
            },
        }
        binding = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": NO_BINDING_POLICY},
            "spec": {"policyName": NO_BINDING_POLICY, "validationActions": ["Deny"]},
        }
        volume_policy, volume_binding = no_volume_writes_policy(UPSTREAM_USER)
        delete_policy, delete_binding = no_pod_deletes_policy(UPSTREAM_USER)
        claim_policy, claim_binding = no_claim_writes_policy(UPSTREAM_USER)
        for body in (volume_policy, delete_policy, claim_policy, policy):
            self._create_ignoring_conflict(lambda b=body: admission.create_validating_admission_policy(b))
        for body in (volume_binding, delete_binding, claim_binding, binding):
            self._create_ignoring_conflict(lambda b=body: admission.create_validating_admission_policy_binding(b))

    def _install_no_preemption_webhook(self) -> None:
        """The webhook that refuses upstream's DisruptionTarget patches as NotFound (preemption_harness.py)."""
        assert self.cluster is not None
        pki = self.cluster.ca_file.parent
        self.webhook = PreemptionWebhook(self.cluster.ca_file, pki / "apiserver.key").start()
        admission = client.AdmissionregistrationV1Api(self.api)
        config = self.webhook.configuration(UPSTREAM_USER)
        self._create_ignoring_conflict(lambda: admission.create_validating_webhook_configuration(config))

    def _check_no_binding(self) -> None:
        """Wait until the policy is in force: upstream's bind of a throwaway pod must be denied."""
        name = "conformance-selfcheck"
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}},
        }
        since = self._mark()
        self._create(node)
        self._wait_upstream(since, [("Add event for node", "node", name)])
        profile = next(iter(self.profiles.values()))
        deadline = time.monotonic() + 60
        try:
            while True:
                pod = self._create(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {
                            "schedulerName": profile.upstream_name,
                            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                        },
                    }
                )
                decision = self._decide("default", name, pod["metadata"]["uid"], upstream=True)
                self._delete_pod("default", name, pod["metadata"]["uid"])
                if decision.kind == "bound" and decision.detail == "denied":
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"upstream's bindings are not denied: {decision}")
                if decision.kind == "bound":  # bound for real: the policy was not active yet
                    self._wait_upstream(since, [("Add event for scheduled pod", "pod", f"default/{name}")])
                time.sleep(0.2)
        finally:
            since = self._mark()
            self.core.delete_node(name)
            self._wait_upstream(since, [("Delete event for node", "node", name)])

    @staticmethod
    def _create_ignoring_conflict(create: Callable[[], Any]) -> None:
        try:
            create()
        except ApiException as e:
            if e.status != 409:
                raise

    # -- upstream's log ----------------------------------------------------------------------------------
    def _upstream_lines(self, since: int) -> list[str]:
        assert self.upstream_log is not None
        self.upstream_log.offset = since
        return self.upstream_log.since()

    def _mark(self) -> int:
        assert self.upstream_log is not None
        return self.upstream_log.mark()

    def _wait_upstream(self, since: int, wanted: Iterable[tuple[str, str, str]], timeout: float = 20.0) -> None:
        """Wait until upstream's log (from ``since``) has a line per (message, key, value) in ``wanted``.

        An item listed n times needs n lines (one pod's several updates).
        """
        wanted_count = Counter(wanted)
        # (message, key) → the keys of ``wanted`` logged with that message: one lookup per line and key.
        keys: dict[str, set[str]] = {}
        for message, key, _ in wanted_count:
            keys.setdefault(message, set()).add(key)
        deadline = time.monotonic() + timeout
        while True:
            pending = Counter(wanted_count)
            for line in self._upstream_lines(since):
                parsed = parse_line(line)
                if parsed is None or parsed[1] not in keys:
                    continue
                _, message, kv = parsed
                for key in keys[message]:
                    item = (message, key, kv.get(key, ""))
                    if pending.get(item, 0) > 0:
                        pending[item] -= 1
                        break
            pending = +pending
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"upstream kube-scheduler never logged {sorted(pending)[:5]}")
            self._check_alive()
            time.sleep(POLL * 5)

    def _check_alive(self) -> None:
        assert self.cluster is not None
        dead = self.cluster.dead_components()
        if dead:
            raise RuntimeError(f"control plane components died: {dead}\n{self.cluster.log_tails()}")
        if self.operator is not None and not self.operator.alive():
            raise RuntimeError(f"kopf-scheduler died\n{self.operator.log_tail()}")

    # -- objects -----------------------------------------------------------------------------------------
    def _create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        kind = obj["kind"]
        ns = (obj.get("metadata") or {}).get("namespace")
        body = dict(obj)
        if kind == "Namespace":
            return _raw(self.core.create_namespace(body, _preload_content=False))
        if kind == "Node":
            return _raw(self.core.create_node(body, _preload_content=False))
        if kind == "Pod":
            return _raw(self.core.create_namespaced_pod(ns, body, _preload_content=False))
        if kind == "Service":
            return _raw(self.core.create_namespaced_service(ns, body, _preload_content=False))
        if kind == "ReplicaSet":
            return _raw(self.apps.create_namespaced_replica_set(ns, body, _preload_content=False))
        if kind in STORAGE_KINDS:
            return create_storage(self.api, obj)
        if kind in DEVICE_KINDS:
            return create_device_object(self.api, obj)
        if kind == "PodDisruptionBudget":
            return self._create_budget(obj)
        raise ValueError(kind)

    def _create_budget(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A PDB, then its status as the disruption controller would write it (no controller-manager runs)."""
        policy = client.PolicyV1Api(self.api)
        namespace = obj["metadata"]["namespace"]
        body = {k: v for k, v in obj.items() if k != "status"}
        created = _raw(policy.create_namespaced_pod_disruption_budget(namespace, body, _preload_content=False))
        status = {"status": obj.get("status") or {}}
        name = created["metadata"]["name"]
        return _raw(
            policy.patch_namespaced_pod_disruption_budget_status(name, namespace, status, _preload_content=False)
        )

    def _kubelet_start(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """The kubelet stand-in: the pod on its node gets the next ``status.startTime`` (preemption_harness.py)."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self._started += 1
        patch = start_time_patch(self._started)
        return _raw(self.core.patch_namespaced_pod_status(name, namespace, patch, _preload_content=False))

    def _read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return _raw(self.core.read_namespaced_pod(name, namespace, _preload_content=False))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _delete_pod(self, namespace: str, name: str, uid: str) -> None:
        try:
            options = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid))
            self.core.delete_namespaced_pod(name, namespace, body=options)
        except ApiException as e:
            if e.status not in (404, 409):
                raise
        deadline = time.monotonic() + 30
        while True:
            pod = self._read_pod(namespace, name)
            if pod is None or pod["metadata"]["uid"] != uid:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {namespace}/{name} not deleted")
            time.sleep(POLL)

    def _decide(
        self, namespace: str, name: str, uid: str, *, upstream: bool = False, timeout: float = DECISION_TIMEOUT
    ) -> Decision:
        """Wait for a scheduler's verdict on the pod: bound, or PodScheduled=False plus its event.

        Upstream's bindings are denied (see the module docstring): for its copies, a SchedulerError whose
        message names the chosen node counts as bound there (``detail="denied"``).
        """
        deadline = time.monotonic() + timeout
        while True:
            pod = self._read_pod(namespace, name)
            if pod is None or pod["metadata"]["uid"] != uid:
                return Decision("error", detail="pod disappeared")
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                return Decision("bound", node=node)
            condition = next(
                (c for c in (pod.get("status") or {}).get("conditions") or () if c.get("type") == "PodScheduled"),
                None,
            )
            if condition is not None and condition.get("status") == "False" and condition.get("reason"):
                if condition["reason"] == "Unschedulable":
                    note = self._failed_scheduling_note(namespace, uid, deadline)
                    # Set in the same status patch as the condition (upstream's updatePod).
                    nominated = (pod.get("status") or {}).get("nominatedNodeName") or None
                    return Decision("unschedulable", note=note, condition=condition.get("message"), nominated=nominated)
                chose = _CHOSE.search(condition.get("message") or "") if upstream else None
                if chose is not None:
                    return Decision("bound", node=chose.group(1), detail="denied")
                if upstream and DENIED_MARKER in (condition.get("message") or ""):
                    return Decision("bound", node=self._nominated(uid), detail="prebind-denied")
                if upstream and CLAIMS_DENIED_MARKER in (condition.get("message") or ""):
                    devices = sorted(denied_devices(condition.get("message")) or ())
                    return Decision("bound", node=self._nominated(uid), detail="prebind-denied", devices=devices)
                if condition["reason"] != "SchedulingGated":
                    return Decision("error", condition=condition.get("message"), detail=condition["reason"])
            if time.monotonic() > deadline:
                return Decision("timeout", detail=f"no verdict in {timeout:.0f}s")
            self._check_alive()
            if not upstream:
                self._stand_in_pv_controller()
            time.sleep(POLL)

    def _untouched(self, namespace: str, name: str, uid: str) -> Decision:
        """A pod no scheduler may act on (gated, or naming its node): its state after :data:`UNTOUCHED_GRACE`.

        The kind is ``gated``, ``assigned`` (its preset node) or ``waiting`` (DynamicResources' PreEnqueue);
        ``condition`` is its PodScheduled condition as
        ``status/reason: message`` (the API server's SchedulingGated one, or none), ``detail`` the reasons of
        the events about it (none expected)."""
        time.sleep(UNTOUCHED_GRACE)
        pod = self._read_pod(namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid:
            return Decision("error", detail="pod disappeared")
        events = _raw(
            self.core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.uid={uid}", _preload_content=False
            )
        )["items"]
        node = (pod.get("spec") or {}).get("nodeName") or None
        gated = bool((pod.get("spec") or {}).get("schedulingGates"))
        condition = next(
            (c for c in (pod.get("status") or {}).get("conditions") or () if c.get("type") == "PodScheduled"),
            None,
        )
        state = (
            None
            if condition is None
            else f"{condition.get('status')}/{condition.get('reason')}: {condition.get('message')}"
        )
        reasons = ",".join(sorted(str(e.get("reason")) for e in events))
        kind = ASSIGNED if node else "gated" if gated else WAITING
        return Decision(kind, node=node, condition=state, detail=reasons)

    def _allocation_problems(
        self, profile: ProfileDef, ours_obj: Mapping[str, Any], upstream: Decision, ours: Decision
    ) -> list[str]:
        """Ours bound: its binding's record, and the PVs of upstream's static bindings (allocations.py)."""
        if ours.kind != "bound" or ours.node is None:
            return []
        namespace, name = ours_obj["metadata"]["namespace"], ours_obj["metadata"]["name"]
        uid = ours_obj["metadata"]["uid"]
        expected = expected_record(namespace, name, ours.node, profile.name)
        deadline = time.monotonic() + RECORD_TIMEOUT
        while True:
            pod = self._read_pod(namespace, name) or {}
            events = _raw(
                self.core.list_namespaced_event(
                    namespace, field_selector=f"involvedObject.uid={uid}", _preload_content=False
                )
            )["items"]
            actual = record_of(pod, events)
            if actual == expected or time.monotonic() > deadline:
                break
            time.sleep(POLL * 5)
        problems = record_problems(expected, actual)
        if upstream.volumes and upstream.node == ours.node:
            ours.volumes = {claim: self._volume_of(claim) for claim in upstream.volumes}
            if ours.volumes != upstream.volumes:
                problems.append(f"volumes: upstream {upstream.volumes}, ours {ours.volumes}")
        return problems

    def _volume_of(self, claim: str) -> str:
        namespace, name = claim.split("/", 1)
        try:
            pvc = _raw(self.core.read_namespaced_persistent_volume_claim(name, namespace, _preload_content=False))
        except ApiException as error:
            return f"<{error.status}>"
        return str((pvc.get("spec") or {}).get("volumeName") or "")

    def _upstream_attempted(self, since: int, key: str) -> bool:
        """Upstream's log has a cycle end for the pod since ``since`` (it should never have one here)."""
        return any(
            parsed is not None and parsed[1] in UPSTREAM_CYCLE_ENDS and parsed[2].get("pod") == key
            for parsed in map(parse_line, self._upstream_lines(since))
        )

    def _stand_in_pv_controller(self) -> None:
        """While ours decides: finish the volume bindings its PreBind started (volume_harness.py)."""
        if self._scenario is not None and self._scenario.volumes:
            complete_bindings(self.api, self._scenario)

    def _nominated(self, uid: str) -> str | None:
        """The node upstream nominated the pod for before its PreBind was denied (the watch may lag a little)."""
        assert self.nominations is not None
        deadline = time.monotonic() + 2
        while (node := self.nominations.nominated(uid)) is None and time.monotonic() < deadline:
            time.sleep(POLL)
        return node

    def _failed_scheduling_note(
        self, namespace: str, uid: str, deadline: float, *, at_least: float = 10.0
    ) -> str | None:
        """The pod's first FailedScheduling note; waits until ``deadline`` (at least ``at_least`` s) for it."""
        deadline = max(deadline, time.monotonic() + at_least)
        while True:
            events = _raw(
                self.core.list_namespaced_event(
                    namespace,
                    field_selector=f"involvedObject.uid={uid},reason=FailedScheduling",
                    _preload_content=False,
                )
            )["items"]
            if events:
                events.sort(key=lambda e: (e.get("eventTime") or "", e.get("lastTimestamp") or ""))
                return str(events[0].get("message") or "")
            if time.monotonic() > deadline:
                return None
            time.sleep(POLL)

    # -- a scenario --------------------------------------------------------------------------------------
    def run_scenario(self, scenario: Scenario, profile_name: str) -> ScenarioResult:
        profile = self.profiles[profile_name]
        started = time.monotonic()
        # The in-process model has no HTTP transport: it judges without the extenders (its notes say so).
        model = Model({p.name: split_extenders(p.spec)[0] for p in self.profiles.values()})
        since = self._mark()
        self._scenario = scenario
        storage = (
            *scenario.storage_classes,
            *scenario.csinodes,
            *scenario.csi_drivers,
            *scenario.capacities,
            *scenario.volumes,
            *scenario.claims,
            *scenario.device_classes,
            *scenario.resource_slices,
            *scenario.resource_claims,
        )
        self._loaded = {}
        self._allocated_claims = set()
        big = len(scenario.nodes) >= BIG_THRESHOLD
        if big:
            self._reset_search_start(profile)
        scenario_mark = self._mark()
        for obj in scenario.namespaces:
            model.load(self._create(obj))
        # Many nodes are created by many threads; the model takes them in the order the watches deliver them.
        for obj in create_nodes(self._create, scenario.nodes):
            model.load(obj)
        for obj in (*scenario.services, *scenario.replica_sets, *storage, *scenario.budgets):
            model.load(self._create(obj))
        wanted = [("Add event for node", "node", n) for n in scenario.node_names]
        for obj in scenario.existing_pods:
            created = self._kubelet_start(self._create_existing(obj))
            key = f"{created['metadata']['namespace']}/{created['metadata']['name']}"
            wanted += [("Add event for scheduled pod", "pod", key), ("Update event for scheduled pod", "pod", key)]
            lifecycle = (obj["metadata"].get("annotations") or {}).get(LIFECYCLE_ANNOTATION)
            if lifecycle is not None:
                created = self._finish(created, lifecycle)
                event = (
                    "Update event for scheduled pod" if lifecycle == TERMINATING else "Delete event for scheduled pod"
                )
                wanted.append((event, "pod", key))
            self._load_pod(model, created)
        self._wait_upstream(since, wanted)
        self._probe(scenario, profile)
        results: list[PodResult] = []
        invalid: list[str] = []
        try:
            for pending in scenario.pending:
                result = self._compare_pod(scenario, profile, pending, model)
                if result is None:
                    invalid.append(pending.name)
                    continue
                results.append(result)
                mark = "ok " if result.agree else "DIFF"
                self.log(
                    f"  seed {scenario.seed} {profile.name} {pending.name}: {mark} "
                    f"upstream={_short(result.upstream)} ours={_short(result.ours)}"
                    + (
                        f" devices={result.upstream.devices}/{result.ours.devices}"
                        if result.upstream.devices is not None or result.ours.devices is not None
                        else ""
                    )
                    + (f" problems={result.problems}" if result.problems else "")
                    + (f" model={result.model_notes}" if result.model_notes else "")
                )
        finally:
            self._scenario = None
            self._cleanup(scenario)
        if big:
            self._check_one_upstream_cycle(scenario_mark, results)
        return ScenarioResult(
            seed=scenario.seed,
            size=scenario.size,
            profile=profile.name,
            nodes=len(scenario.nodes),
            existing_pods=len(scenario.existing_pods),
            pods=results,
            seconds=time.monotonic() - started,
            invalid=invalid,
        )

    def _check_one_upstream_cycle(self, since: int, results: Sequence[PodResult]) -> None:
        """Big clusters: upstream must have run one cycle per pod (a retry would have moved its start index)."""
        cycles = Counter(
            parsed[2].get("pod")
            for parsed in map(parse_line, self._upstream_lines(since))
            if parsed is not None and parsed[1] in UPSTREAM_CYCLE_ENDS
        )
        for result in results:
            count = cycles[f"{result.namespace}/{result.name}"]
            if count > 1:
                result.problems.append(f"harness: upstream ran {count} cycles for the pod (its start index moved)")

    def _reset_search_start(self, profile: ProfileDef) -> None:
        """Both schedulers' node-search start index to 0: a pod reaches Filter in a cluster of one node, where
        the index moves to ``(i + processed) mod 1`` (big_clusters.py says why)."""
        since = self._mark()
        self._create(reset_node())
        self._wait_upstream(since, [("Add event for node", "node", RESET_NODE)])
        reset = Scenario(seed=0, size="reset", nodes=[reset_node()], namespaces=[{"metadata": {"name": "default"}}])
        self._probe(reset, profile)
        since = self._mark()
        self.core.delete_node(RESET_NODE)
        self._wait_upstream(since, [("Delete event for node", "node", RESET_NODE)])

    def _create_existing(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """An existing pod: created on its node, or created unassigned and bound through a Binding."""
        if (obj["metadata"].get("annotations") or {}).get(BIND_ANNOTATION) != "Binding":
            return self._create(obj)
        body = json.loads(json.dumps(obj))
        node = body["spec"].pop("nodeName")
        body["spec"]["schedulerName"] = NOBODY
        created = self._create(body)
        namespace, name = created["metadata"]["namespace"], created["metadata"]["name"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": created["metadata"]["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.core.create_namespaced_pod_binding(name, namespace, binding, _preload_content=False)
        bound = self._read_pod(namespace, name)
        if bound is None or bound["spec"].get("nodeName") != node:
            raise RuntimeError(f"existing pod {namespace}/{name} was not bound to {node}: {bound}")
        return bound

    def _finish(self, pod: dict[str, Any], lifecycle: str) -> dict[str, Any]:
        """Make an existing pod terminating (deleted, held by a finalizer) or Succeeded; the result as read."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if lifecycle == TERMINATING:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        elif lifecycle == SUCCEEDED:
            self.core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Succeeded"}})
        else:
            raise ValueError(f"unknown lifecycle {lifecycle!r}")
        current = self._read_pod(namespace, name)
        assert current is not None, f"{namespace}/{name} vanished"
        return current

    def _probe(self, scenario: Scenario, profile: ProfileDef) -> None:
        """Both schedulers must see exactly this scenario's nodes before the first pending pod."""
        n = len(scenario.nodes)
        # Only the node count matters (a profile's addedAffinity may word the rejections differently).
        expected = f"0/{n} nodes are available: "
        namespace = scenario.namespace_names[0]
        for scheduler in (profile.upstream_name, profile.name):
            deadline = time.monotonic() + 60
            while True:
                body = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "probe", "namespace": namespace},
                    "spec": {
                        "schedulerName": scheduler,
                        "nodeSelector": {PROBE_LABEL: "none"},
                        # Tolerate every taint and cordon: only the node count may vary in the message.
                        "tolerations": [{"operator": "Exists"}],
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                    },
                }
                created = self._create(body)
                uid = created["metadata"]["uid"]
                decision = self._decide(namespace, "probe", uid, upstream=scheduler == profile.upstream_name)
                self._delete_pod(namespace, "probe", uid)
                if decision.kind == "unschedulable" and (decision.condition or "").startswith(expected):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{scheduler} does not see the scenario's {n} nodes: {decision}")
                time.sleep(0.2)

    def _cleanup(self, scenario: Scenario) -> None:
        since = self._mark()
        for pod in scenario.existing_pods:
            if HOLD_FINALIZER in (pod["metadata"].get("finalizers") or ()):
                with contextlib.suppress(ApiException):
                    self.core.patch_namespaced_pod(
                        pod["metadata"]["name"], pod["metadata"]["namespace"], {"metadata": {"finalizers": None}}
                    )
        for namespace in scenario.namespace_names:
            self.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
            for svc in self.core.list_namespaced_service(namespace).items:
                self.core.delete_namespaced_service(svc.metadata.name, namespace)
            self.apps.delete_collection_namespaced_replica_set(namespace)
            client.PolicyV1Api(self.api).delete_collection_namespaced_pod_disruption_budget(namespace)
        delete_storage(self.api, scenario)
        delete_devices(self.api, scenario)
        with ThreadPoolExecutor(CREATE_THREADS if len(scenario.nodes) >= BIG_THRESHOLD else 1) as pool:
            list(pool.map(self.core.delete_node, scenario.node_names))
        self._wait_upstream(since, [("Delete event for node", "node", n) for n in scenario.node_names])

    def _compare_pod(self, scenario: Scenario, profile: ProfileDef, pending: Any, model: Model) -> PodResult | None:
        namespace, name = pending.namespace, pending.name
        key = f"{namespace}/{name}"
        # 1. upstream decides (and is denied the binding, or its preemption), then its copy goes.
        since = self._mark()
        try:
            upstream_obj = self._create(with_scheduler(pending.manifest, profile.upstream_name))
        except ApiException as e:
            self.log(f"  seed {scenario.seed} {name}: the API server refused the generated pod: {e.body}")
            return None
        uid = upstream_obj["metadata"]["uid"]
        verdict = model.decide(profile.name, upstream_obj)
        untouched = not_for_a_scheduler(pending.manifest)
        if untouched:
            upstream = self._untouched(namespace, name, uid)
            cycle = UpstreamCycle()
            if self._upstream_attempted(since, key):
                upstream.detail += "; upstream ran a cycle for it"
        else:
            upstream = self._decide(namespace, name, uid, upstream=True)
            cycle = self._upstream_cycle(since, key, upstream)
            if upstream.kind == "bound":
                upstream.volumes = upstream_static_bindings(self._upstream_lines(since), key) or None
        self._delete_pod(namespace, name, uid)
        if asks_for_extended_devices(pending.manifest):
            self._settle_upstream_claim(since, namespace, name, uid)
        # 2. ours decides on the same state (and, if it preempts, really deletes its victims).
        since = self._mark()
        assert self.nominations is not None
        gone = self.nominations.mark()
        ours_obj = self._create(with_scheduler(pending.manifest, profile.name))
        ours_uid = ours_obj["metadata"]["uid"]
        # A victim already terminating (held by a finalizer here) never goes: ours cannot bind then.
        patience = 2.0 if upstream.terminating_victims else PREEMPTION_TIMEOUT
        if untouched:
            ours = self._untouched(namespace, name, ours_uid)
        else:
            decided = self._decide(namespace, name, ours_uid)
            ours = self._follow_preemption(namespace, name, ours_uid, decided, gone, patience=patience)
        # 3. keep ours if bound (both see it next), else drop it; both must see our victims go.
        deleted = [v for v in ours.victims if self._read_pod(*v.split("/", 1)) is None]
        wanted = [("Delete event for scheduled pod", "pod", victim) for victim in deleted]
        allocation_problems = self._allocation_problems(profile, ours_obj, upstream, ours)
        if ours.kind in ("bound", ASSIGNED) or ours.final_node:
            bound: dict[str, Any] | None = self._kubelet_start(ours_obj)
            wanted += [("Add event for scheduled pod", "pod", key), ("Update event for scheduled pod", "pod", key)]
            wanted += self._claims_seen(model, namespace, pending.manifest, ours)
        else:
            bound = None
            self._delete_pod(namespace, name, ours_uid)
        self._wait_upstream(since, wanted)
        result = self._judge(scenario, profile, pending, upstream, cycle, ours, verdict, upstream_obj)
        result.problems += allocation_problems
        if len(scenario.nodes) >= BIG_THRESHOLD and upstream.kind == "bound":
            # Big clusters: the sample itself (both searches start from the same index, see big_clusters.py).
            result.problems += sampling_problems(cycle.final_scores, verdict.feasible, cycle.used_hint)
        if not result.agree or result.model_notes:
            result.context = self._context(model, result, verdict, cycle)
        for victim in deleted:
            if victim in self._loaded:
                model.delete(self._loaded.pop(victim))
        if bound is not None:
            self._load_pod(model, bound)
        if scenario.volumes and pending.manifest["spec"].get("volumes"):
            # Our PreBind may have bound claims (the stand-in PV controller finished them): both sides must see
            # them before the next pod. Upstream logs nothing for PV/PVC events; its informers are quick.
            for obj in read_storage(self.api, scenario):
                model.load(obj)
            time.sleep(0.3)
        return result

    def _claims_seen(self, model: Model, namespace: str, manifest: Mapping[str, Any], ours: Decision) -> list[Any]:
        """Our bound pod's claims: their devices on ``ours``, into the model, and the upstream log lines saying
        its allocated-devices index took each device (``allocateddevices.go`` at -v=6). ``ours.devices`` are
        those of the claims upstream's first denied write stands for (``devices.compared_claims``): the user
        claims, else the claim ours created for DRA-backed extended resources."""
        names = pod_claim_names(dict(manifest))
        extended = extended_claim_name(self._read_pod(namespace, str(manifest["metadata"]["name"])))
        if not names and extended is None:
            return []
        wanted: list[Any] = []
        devices: list[str] = []
        compared = compared_claims(names, extended)
        for name in (*names, *([extended] if extended else [])):
            claim = read_claim(self.api, namespace, name)
            if claim is None:
                continue
            model.load(claim)
            allocated = allocated_devices(claim)
            if name in compared:
                devices += allocated
            if f"{namespace}/{name}" in self._allocated_claims:
                continue  # a shared claim allocated for an earlier pod: upstream logs its devices once
            if allocated:
                self._allocated_claims.add(f"{namespace}/{name}")
            wanted += [("Observed device allocation", "claim", f"{namespace}/{name}")] * len(allocated)
        ours.devices = sorted(devices)
        return wanted

    def _settle_upstream_claim(self, since: int, namespace: str, name: str, uid: str) -> None:
        """Upstream's extended-resource claim for its copy of the pod is gone, and its allocated-devices index
        has let go of the devices its assume cache briefly held for it (devices.py)."""
        left = delete_owned_extended_claims(self.api, namespace, uid)
        if left:
            self.log(f"  {namespace}/{name}: upstream's extended-resource claims outlived its Unreserve: {left}")
        self._wait_upstream(since, upstream_claim_lines(self._upstream_lines(since), namespace, name))

    def _load_pod(self, model: Model, pod: dict[str, Any]) -> None:
        model.load(pod)
        self._loaded[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = pod

    def _upstream_cycle(self, since: int, key: str, upstream: Decision) -> UpstreamCycle:
        """Upstream's log of its cycle for the pod, complete: a bind attempt, or a failure and its preemption."""
        cycle = UpstreamCycle()
        if upstream.detail == "prebind-denied":
            # No "Attempting to bind" line: PreBind failed first. Its failure handler's line ends the cycle.
            with contextlib.suppress(TimeoutError):
                self._wait_upstream(since, [("Error scheduling pod; retrying", "pod", key)], timeout=5)
            cycle = parse_cycle(self._upstream_lines(since), key)
            if upstream.node is None and len(cycle.top_nodes) == 1:
                upstream.node = next(iter(cycle.top_nodes))  # the watch missed the nomination
            cycle.bound_node = upstream.node
        elif upstream.kind == "bound":
            self._wait_upstream(since, [("Attempting to bind pod to node", "pod", key)])
            cycle = parse_cycle(self._upstream_lines(since), key)
        elif upstream.kind == "unschedulable":
            # The failure line follows PostFilter (and any preemption's decision); the preemption's goroutine
            # may still be refused victims after it: wait for its end line.
            with contextlib.suppress(TimeoutError):
                self._wait_upstream(since, [("Unable to schedule pod; no fit; waiting", "pod", key)], timeout=5)
            deadline = time.monotonic() + 10
            cycle = parse_cycle(self._upstream_lines(since), key)
            while not cycle.preemption_done and time.monotonic() < deadline:
                time.sleep(POLL * 5)
                cycle = parse_cycle(self._upstream_lines(since), key)
            upstream.nominated = upstream.nominated or cycle.preemption_node
            upstream.victims = sorted({*cycle.victims, *cycle.preempted_for_real})
            upstream.terminating_victims = sorted(cycle.terminating_victims)
        return cycle

    def _follow_preemption(
        self, namespace: str, name: str, uid: str, ours: Decision, gone: int, *, patience: float = PREEMPTION_TIMEOUT
    ) -> Decision:
        """Our verdict with its preemption: nomination, victims (pods disrupted since ``gone``), final node.

        A preempting pod binds once its victims are gone, perhaps before :meth:`_decide` saw it unschedulable:
        a PodScheduled=False message that the pod watch saw first makes it unschedulable again here (its first
        verdict is what upstream's is compared with), with the node it was bound to as ``final_node``.
        """
        assert self.nominations is not None
        facts = self.nominations.get(uid)
        lagging = ours.kind == "bound" and (facts is None or facts.unschedulable is None)
        # The watch may lag behind the binding: a FailedScheduling event says there was a failed cycle.
        if lagging and self._failed_scheduling_note(namespace, uid, time.monotonic(), at_least=0) is not None:
            deadline = time.monotonic() + 5
            while (facts is None or facts.unschedulable is None) and time.monotonic() < deadline:
                time.sleep(POLL * 5)
                facts = self.nominations.get(uid)
        if ours.kind == "bound" and facts is not None and facts.unschedulable is not None:
            deadline = time.monotonic() + 10
            note = self._failed_scheduling_note(namespace, uid, deadline)
            first, nominated = facts.unschedulable, facts.nominated
            ours = Decision("unschedulable", note=note, condition=first, nominated=nominated, final_node=ours.node)
        if ours.kind != "unschedulable":
            return ours
        deadline = time.monotonic() + 2
        while (facts is None or facts.unschedulable is None) and time.monotonic() < deadline:
            time.sleep(POLL * 5)  # the watch may lag behind _decide's read
            facts = self.nominations.get(uid)
        if facts is not None and facts.unschedulable is not None:
            # _decide's poll may have met a later failed cycle (e.g. after its victims went); the note is the
            # first cycle's, and so is upstream's verdict: compare the first PodScheduled message the watch saw.
            ours.condition = facts.unschedulable
        deadline = time.monotonic() + 2
        while ours.nominated is None and time.monotonic() < deadline:
            ours.nominated = self.nominations.nominated(uid)
            if ours.nominated is None:
                time.sleep(POLL * 5)
        if ours.nominated is None:
            return ours
        deadline = time.monotonic() + patience
        while ours.final_node is None and time.monotonic() < deadline:
            pod = self._read_pod(namespace, name)
            if pod is None or pod["metadata"]["uid"] != uid:
                break
            ours.final_node = (pod.get("spec") or {}).get("nodeName") or None
            if ours.final_node is None:
                self._check_alive()
                self._stand_in_pv_controller()  # its PreBind may wait for claims, as in _decide
                time.sleep(POLL * 5)
        # The last victims' deletions may still be on their way: wait until nothing more goes for a moment.
        key = f"{namespace}/{name}"
        seen = -1
        while True:
            victims = [f.key for f in self.nominations.gone_since(gone) if f.key != key]
            if len(victims) == seen:
                break
            seen = len(victims)
            time.sleep(0.3)
        ours.victims = sorted(victims)
        return ours

    def _judge(
        self,
        scenario: Scenario,
        profile: ProfileDef,
        pending: Any,
        upstream: Decision,
        cycle: UpstreamCycle,
        ours: Decision,
        verdict: ModelVerdict,
        upstream_obj: Mapping[str, Any],
    ) -> PodResult:
        problems: list[str] = []
        top = cycle.top_nodes or ({upstream.node} if upstream.node else set())
        hint_tie = False
        if upstream.kind != ours.kind:
            problems.append(f"verdict: upstream {_short(upstream)}, ours {_short(ours)}")
        elif upstream.kind == "unschedulable":
            if upstream.note is None or ours.note is None:
                problems.append("message: a FailedScheduling event is missing")
            elif upstream.note != ours.note:
                problems.append("message: FailedScheduling notes differ")
            if upstream.condition != ours.condition:
                problems.append("message: PodScheduled messages differ")
            problems += preemption_problems(upstream, ours)
        elif upstream.kind == "bound":
            if cycle.used_hint and ours.node not in top and {ours.node, cycle.hint} <= verdict.top_nodes:
                # Upstream took its batching hint without ranking; a full ranking ties the hint with our node.
                top = top | {ours.node}
                hint_tie = True
            if ours.node not in top:
                hinted = f" (it took the batching hint {cycle.hint})" if cycle.used_hint else ""
                problems.append(f"node: ours {ours.node} is not among upstream's top nodes {sorted(top)}{hinted}")
            elif upstream.devices is not None and ours.node == upstream.node and ours.devices != upstream.devices:
                problems.append(f"devices: upstream {upstream.devices}, ours {ours.devices}")
        elif upstream.kind in UNTOUCHED_KINDS:
            if (upstream.node, upstream.condition, upstream.detail) != (ours.node, ours.condition, ours.detail):
                problems.append(
                    f"untouched: upstream {upstream.node} {upstream.condition!r} events [{upstream.detail}], "
                    f"ours {ours.node} {ours.condition!r} events [{ours.detail}]"
                )
        elif upstream.kind in ("error", "timeout"):
            problems.append(f"verdict: upstream {_short(upstream)}, ours {_short(ours)}")
        if cycle.preempted_for_real or cycle.preemption_errors:
            problems.append(
                f"harness: upstream preempted for real {cycle.preempted_for_real} or failed {cycle.preemption_errors}"
            )
        # The model judges pods as a scheduling cycle would; the untouched ones have no cycle.
        notes = [] if upstream.kind in UNTOUCHED_KINDS else _model_notes(verdict, upstream, cycle)
        # Decisive: upstream's message names the plugin, or its scores of the plugin differ between nodes, or
        # it filtered out a node in the model while the model matched upstream (same verdict, feasible set).
        decisive = plugins_in_message(upstream.note or "") | varying_plugins(cycle.plugin_scores)
        if upstream.nominated is not None and upstream.kind == "unschedulable":
            decisive.add(PREEMPTION)
        if not notes and upstream.kind not in UNTOUCHED_KINDS:
            decisive |= {rejection.split(":", 1)[0] for rejection in verdict.rejections.values()}
        if upstream.kind == ours.kind and upstream.kind in _HELD_BY:
            decisive.add(_HELD_BY[upstream.kind])
        plugins = set(pending.features) | decisive
        return PodResult(
            seed=scenario.seed,
            profile=profile.name,
            index=pending.index,
            name=pending.name,
            namespace=pending.namespace,
            features=list(pending.features),
            plugins=sorted(plugins),
            decisive=sorted(decisive),
            upstream=upstream,
            ours=ours,
            upstream_top=sorted(top),
            upstream_hint=cycle.hint if cycle.used_hint else None,
            hint_tie=hint_tie,
            upstream_scores=dict(cycle.final_scores),
            upstream_plugin_scores={p: dict(s) for p, s in cycle.plugin_scores.items()},
            model={
                "node": verdict.node,
                "message": verdict.message,
                "error": verdict.error,
                "top": sorted(verdict.top_nodes),
                "scores": verdict.final_scores,
                "plugin_scores": verdict.plugin_scores,
                "rejections": verdict.rejections,
                "nominated": verdict.nominated,
                "victims": verdict.victims,
            },
            problems=problems,
            model_notes=notes,
            hints=scenario_hints(scenario),
            uses=pod_uses(pending.manifest, scenario),
            manifest=_clean(upstream_obj),
        )

    def _context(self, model: Model, result: PodResult, verdict: ModelVerdict, cycle: UpstreamCycle) -> dict[str, Any]:
        """The nodes a disagreement is about, and the pods on them, as they were at decision time."""
        cache = model.app.cache
        all_nodes = list(cache.node_names())
        if result.upstream.kind != result.ours.kind or result.upstream.kind == "unschedulable":
            relevant = set(all_nodes) if len(all_nodes) <= 6 else set(verdict.rejections) | verdict.feasible
        else:
            relevant = set(result.upstream_top) | {result.ours.node or ""} | verdict.top_nodes
            for plugin, scores in cycle.plugin_scores.items():
                ours_scores = verdict.plugin_scores.get(plugin, {})
                relevant |= {n for n, s in scores.items() if ours_scores.get(n, 0) != s}
        relevant.discard("")
        nodes = []
        pods = []
        for name in sorted(relevant):
            info = cache.node(name)
            if info is None:
                continue
            nodes.append(_clean(info.obj))
            pods.extend(_clean(p.obj) for p in info.pods.values())
        return {"nodes": nodes, "pods": pods, "total_nodes": len(all_nodes)}


def preemption_problems(upstream: Decision, ours: Decision) -> list[str]:
    """Where two unschedulable verdicts differ in their preemption: nominated node, victims, execution."""
    problems: list[str] = []
    if upstream.nominated != ours.nominated:
        problems.append(f"preemption: upstream nominated {upstream.nominated}, ours {ours.nominated}")
    elif upstream.victims != ours.victims:
        problems.append(f"preemption: victims differ: upstream {upstream.victims}, ours {ours.victims}")
    if ours.nominated is not None and not upstream.terminating_victims and ours.final_node != ours.nominated:
        where = f"bound to {ours.final_node}" if ours.final_node else f"not bound in {PREEMPTION_TIMEOUT:.0f}s"
        problems.append(f"preemption: ours was nominated for {ours.nominated} and {where} after its victims went")
    return problems


def _short(decision: Decision) -> str:
    if decision.kind == "bound":
        return f"bound:{decision.node}"
    if decision.kind == "unschedulable" and decision.nominated:
        return f"preempting:{decision.nominated}({len(decision.victims)} victims)"
    if decision.kind == "unschedulable":
        return "unschedulable"
    return f"{decision.kind}({decision.detail or decision.condition})"


def _model_notes(verdict: ModelVerdict, upstream: Decision, cycle: UpstreamCycle) -> list[str]:
    """Where the in-process model differs from upstream (diagnostics; not counted as disagreements)."""
    notes: list[str] = []
    model_kind = "bound" if verdict.node else "unschedulable" if verdict.message is not None else "error"
    if model_kind != upstream.kind:
        notes.append(f"model verdict {model_kind}")
        return notes
    if upstream.kind == "unschedulable" and verdict.message != upstream.condition:
        notes.append("model message")
    if upstream.kind == "unschedulable" and verdict.nominated != upstream.nominated:
        notes.append("model nomination")
    elif upstream.kind == "unschedulable" and verdict.victims != sorted(
        {*upstream.victims, *upstream.terminating_victims}
    ):
        notes.append("model victims")
    if upstream.kind == "bound":
        if cycle.used_hint:
            # Upstream filtered the hinted node alone and scored nothing; a full ranking (ours) must still put
            # that node first, or batching changed the outcome.
            if cycle.hint not in verdict.top_nodes:
                notes.append("upstream batching hint outside the model's top nodes")
            return notes
        if cycle.final_scores and verdict.final_scores:
            if set(cycle.final_scores) != verdict.feasible:
                notes.append("model feasible set")
            for plugin in sorted(set(cycle.plugin_scores) | set(verdict.plugin_scores)):
                theirs = cycle.plugin_scores.get(plugin, {})
                ours = verdict.plugin_scores.get(plugin, {})
                nodes = set(theirs) | set(ours)
                if any(theirs.get(n, 0) != ours.get(n, 0) for n in nodes):
                    notes.append(f"model scores {plugin}")
            if cycle.top_nodes != verdict.top_nodes:
                notes.append("model top nodes")
        elif bool(cycle.final_scores) != bool(verdict.final_scores):
            notes.append("model feasible set")
    return notes
