"""Faults between the operator and the API server (issue 39, item 1): the operator talks to the real kube-apiserver
through ``faultproxy.FaultProxy``, which slows, resets, stalls, fails (5xx, 429 with Retry-After) its requests or cuts
its watches and answers them ``410 Gone``, while a burst of pods over-fills part of the cluster.

After each scenario, seen from the API server directly (not through the proxy):

* every pod is bound exactly once (no pod got two ``Scheduled`` events; the API server refuses a second Binding) or
  pending with a reason (``PodScheduled=False`` with a reason and a message: ``Unschedulable`` with upstream's
  ``0/N nodes are available`` text, or, as kube-scheduler leaves it when the patch of a later attempt's condition
  is lost, the ``SchedulerError`` of a failed Binding);
* the operator used all the room there is (bound pods = what fits), and no node is over its allocatable;
* no volume is half-bound (a PV's claimRef names a claim that is Bound to it, and a bound pod with a claim sits on its
  PV's node);
* the same operator process is alive and schedules a fresh batch afterwards (its watches work again);
* the time to recover (faults lifted → everything settled) is printed and collected; with
  ``KOPF_SCHEDULER_FAULTS_RECORD=path.json`` the module's figures are written there (bench/results/faults.json).

One operator and one proxy serve the whole module (recovering without a restart across every scenario is part of
the claim); each scenario has its own namespace and nodes.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import Cluster, NodeFactory
from tests.e2e.faultproxy import BIND, WATCH, FaultProxy, Faults, Rule
from tests.e2e.operator_process import (
    REPO_ROOT,
    OperatorProcess,
    create_pods_parallel,
    create_profile,
    delete_peering,
    delete_profile,
    overcommitted_nodes,
    pod_condition,
    pod_manifest,
    scheduled_events_per_pod,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)
from tests.e2e.soak import soak_scale
from tests.e2e.test_operator_volumes import claim, create_first_consumer_class, delete_storage_class, local_pv

#: The over-filled part: NODES nodes of NODE_CPU, pods of POD_CPU: FITS pods fit, BURST are created (CLAIMS of
#: them with a WaitForFirstConsumer claim, one local PV per node: one claim more than there are PVs).
#: ``make soak`` multiplies the nodes and the burst (``KOPF_SCHEDULER_SOAK_SCALE``).
NODES, NODE_CPU, POD_CPU = 3 * soak_scale(), 2000, 200
FITS = NODES * NODE_CPU // POD_CPU
BURST, CLAIMS = 40 * soak_scale(), NODES + 1
#: A spare node for the batch created after the faults: the operator must still see and bind new pods.
AFTER = 5
#: How long the faults last (from just before the burst).
FAULT_SECONDS = 10.0
#: Faults lifted → everything settled: generous (2 shared CPUs; a stalled Binding waits for the client's 30 s).
SETTLE_TIMEOUT = 120.0

RECORD_ENV = "KOPF_SCHEDULER_FAULTS_RECORD"


@dataclass
class Outcome:
    scenario: str
    pods: int
    bound: int
    pending_with_reason: int
    faults_fired: dict[str, int]
    fault_window_s: float
    recovered_s: float
    after_batch_bound_s: float
    pods_lost: int = 0
    double_bindings: int = 0
    nodes_overcommitted: int = 0
    operator_restarts: int = 0
    notes: str = ""


@dataclass
class Faulted:
    """The module's proxy and operator, and the profile its pods use."""

    cluster: Cluster
    proxy: FaultProxy
    operator: OperatorProcess
    profile: str
    outcomes: list[Outcome] = field(default_factory=list)


@pytest.fixture(scope="module")
def faulted(cluster: Cluster, crds: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faulted]:
    if cluster.local is None and os.environ.get("KOPF_SCHEDULER_FAULTS_EXTERNAL") != "1":
        pytest.skip("the fault proxy needs the local control plane (or KOPF_SCHEDULER_FAULTS_EXTERNAL=1)")
    work = tmp_path_factory.mktemp("faults")
    peering = f"p-faults-{secrets.token_hex(3)}"
    profile = f"s-faults-{secrets.token_hex(3)}"
    with FaultProxy(cluster.kubeconfig, work / "proxy") as proxy:
        operator = OperatorProcess(proxy.kubeconfig_for(), peering_name=peering, log_dir=work, name="operator-faulted")
        try:
            operator.start()
            create_profile(cluster.api, profile, {})
            wait_profile_status(cluster.api, profile, ready=True)
            faulted = Faulted(cluster, proxy, operator, profile)
            yield faulted
            _record(faulted.outcomes)
        finally:
            print(operator.log_tail(40))
            operator.stop()
            delete_profile(cluster.api, profile, force=True)
            delete_peering(cluster.api, peering)


@pytest.fixture
def local_class(cluster: Cluster) -> Iterator[str]:
    name = create_first_consumer_class(cluster, "faults", "kubernetes.io/no-provisioner")
    yield name
    delete_storage_class(cluster, name)


@dataclass
class Stage:
    """One scenario's cluster: the over-filled nodes, the spare node, the PVs, the namespace."""

    namespace: str
    nodes: list[str]
    spare: str
    labels: dict[str, str]
    spare_labels: dict[str, str]
    pvs: list[str]
    storage_class: str


@pytest.fixture
def stage(cluster: Cluster, kwok_nodes: NodeFactory, namespace: str, local_class: str) -> Iterator[Stage]:
    token = secrets.token_hex(3)
    labels, spare_labels = {"faults-group": token}, {"faults-spare": token}
    nodes = [kwok_nodes(cpu=f"{NODE_CPU}m", memory="64Gi", labels=labels) for _ in range(NODES)]
    spare = kwok_nodes(cpu=f"{NODE_CPU}m", memory="64Gi", labels=spare_labels)
    pvs = [f"pv-faults-{token}-{i}" for i in range(NODES)]
    for pv, node in zip(pvs, nodes, strict=True):
        cluster.core.create_persistent_volume(local_pv(pv, local_class, node, "1Gi"))
    for i in range(CLAIMS):
        cluster.core.create_namespaced_persistent_volume_claim(namespace, claim(f"data-{i}", local_class, "1Gi"))
    try:
        yield Stage(namespace, nodes, spare, labels, spare_labels, pvs, local_class)
    finally:
        for pv in pvs:
            try:
                cluster.core.delete_persistent_volume(pv)
            except ApiException as e:
                if e.status != 404:
                    raise


def burst(stage: Stage, profile: str) -> list[dict[str, Any]]:
    pods = []
    for i in range(BURST):
        spec = None
        if i < CLAIMS:
            spec = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{i}"}}]}
        name = f"claim-{i}" if i < CLAIMS else f"burst-{i}"
        pods.append(pod_manifest(name, profile, cpu=f"{POD_CPU}m", node_selector=stage.labels, spec=spec))
    return pods


# ---- the invariants --------------------------------------------------------------------------------------


def _settled(core: client.CoreV1Api, namespace: str, expected_bound: int) -> tuple[bool, str]:
    """Every pod bound, or pending with upstream's reason; and as many bound as fit."""
    bound, pending, unexplained = 0, 0, []
    for pod in core.list_namespaced_pod(namespace).items:
        if pod.spec.node_name:
            bound += 1
            continue
        condition = pod_condition(pod)
        explained = condition is not None and condition.status == "False" and condition.reason and condition.message
        if explained:
            pending += 1
        else:
            said = f"{condition.reason}: {condition.message}" if condition is not None else "no condition"
            unexplained.append(f"{pod.metadata.name} ({said})")
    ok = not unexplained and bound == expected_bound
    return (
        ok,
        f"{bound} bound (expected {expected_bound}), {pending} pending with a reason, unexplained: {unexplained[:8]}",
    )


def _volumes_consistent(core: client.CoreV1Api, stage: Stage) -> tuple[bool, str]:
    """No PV or claim half-bound: a PV's claimRef names a claim Bound to it; a bound pod with a claim sits on its
    PV's node."""
    claims = {c.metadata.name: c for c in core.list_namespaced_persistent_volume_claim(stage.namespace).items}
    pv_node: dict[str, str] = {}
    problems = []
    for name, node in zip(stage.pvs, stage.nodes, strict=True):
        pv = core.read_persistent_volume(name)
        ref = pv.spec.claim_ref
        if ref is None:
            continue
        bound_claim = claims.get(ref.name)
        if bound_claim is None or bound_claim.status.phase != "Bound" or bound_claim.spec.volume_name != name:
            problems.append(f"PV {name} claims {ref.name}, which is not Bound to it")
            continue
        pv_node[ref.name] = node
    for pod in core.list_namespaced_pod(stage.namespace).items:
        for volume in pod.spec.volumes or ():
            if volume.persistent_volume_claim is None or not pod.spec.node_name:
                continue
            wanted = pv_node.get(volume.persistent_volume_claim.claim_name)
            if wanted != pod.spec.node_name:
                problems.append(f"{pod.metadata.name} on {pod.spec.node_name}, its claim's PV on {wanted}")
    return not problems, "; ".join(problems)


def _run(
    faulted: Faulted,
    stage: Stage,
    scenario: str,
    faults: Faults,
    *,
    during: Callable[[], str] | None = None,
    settled_also: Callable[[], None] | None = None,
    expected_bound: int = FITS,
    deleted: int = 0,
    min_fired: dict[str, int] | None = None,
) -> Outcome:
    """The burst under ``faults`` for FAULT_SECONDS (``during`` runs once the burst is created; its note is
    recorded), then the faults lifted; once settled (and ``settled_also`` returned: what else recovery waits for),
    the invariants checked and the outcome recorded."""
    cluster, proxy, operator = faulted.cluster, faulted.proxy, faulted.operator
    pid, core, namespace = operator.pid, cluster.core, stage.namespace
    before = Counter(proxy.counts)
    scheduled_before = operator.scheduled_count(faulted.profile)
    started = time.monotonic()
    proxy.inject(faults)
    try:
        create_pods_parallel(core, namespace, burst(stage, faulted.profile))
        note = during() if during is not None else ""
        time.sleep(max(0.0, FAULT_SECONDS - (time.monotonic() - started)))
    finally:
        proxy.clear()
    lifted = time.monotonic()
    fired = {k: v - before.get(k, 0) for k, v in proxy.counts.items() if v - before.get(k, 0) and k != "requests"}
    for kind, least in (min_fired or {}).items():
        assert fired.get(kind, 0) >= least, f"{scenario}: fault {kind} fired {fired.get(kind, 0)} times: {fired}"

    last = ""

    def settled() -> bool:
        nonlocal last
        ok, last = _settled(core, namespace, expected_bound)
        return ok

    wait_for(
        settled, timeout=SETTLE_TIMEOUT, interval=0.25, message=lambda: f"{scenario}: {last}\n{operator.log_tail()}"
    )
    if settled_also is not None:
        settled_also()
    recovered = time.monotonic() - lifted
    wait_for(
        lambda: _volumes_consistent(core, stage)[0], timeout=60, message=lambda: _volumes_consistent(core, stage)[1]
    )

    # The same process, still scheduling: a fresh batch on the spare node.
    after_start = time.monotonic()
    after = [
        pod_manifest(f"after-{i}", faulted.profile, cpu=f"{POD_CPU}m", node_selector=stage.spare_labels)
        for i in range(AFTER)
    ]
    create_pods_parallel(core, namespace, after)
    wait_pods_bound(core, namespace, [p["metadata"]["name"] for p in after], timeout=60)
    after_bound = time.monotonic() - after_start

    ok, summary = _settled(core, namespace, expected_bound + AFTER)
    assert ok, summary
    scheduled = scheduled_events_per_pod(cluster.api, namespace)
    doubles = {name: n for name, n in scheduled.items() if n > 1}
    over = overcommitted_nodes(core, [*stage.nodes, stage.spare])
    assert not doubles, f"{scenario}: pods scheduled twice: {doubles}"
    assert over == {}, f"{scenario}: over-committed nodes: {over}"
    assert operator.alive(), f"{scenario}: the operator died\n{operator.log_tail()}"
    assert operator.pid == pid, f"{scenario}: the operator restarted"

    pods = core.list_namespaced_pod(namespace).items
    bound = sum(1 for p in pods if p.spec.node_name)
    binds = operator.scheduled_count(faulted.profile) - scheduled_before
    assert binds <= bound + deleted, (
        f"{scenario}: {binds:.0f} binds counted for {bound} bound pods (+{deleted} deleted)"
    )
    outcome = Outcome(
        scenario=scenario,
        pods=len(pods),
        bound=bound,
        pending_with_reason=sum(1 for p in pods if not p.spec.node_name),
        faults_fired=fired,
        fault_window_s=round(lifted - started, 1),
        recovered_s=round(recovered, 1),
        after_batch_bound_s=round(after_bound, 1),
        notes=note,
    )
    print(f"\n{scenario}: {json.dumps(asdict(outcome))}")
    faulted.outcomes.append(outcome)
    return outcome


# ---- the scenarios ---------------------------------------------------------------------------------------


def test_latency_and_jitter_on_every_request(faulted: Faulted, stage: Stage) -> None:
    faults = Faults(latency=0.05, jitter=0.25)
    _run(faulted, stage, "latency 50 ms + jitter 0-250 ms, every request", faults)


def test_connection_resets_mid_burst(faulted: Faulted, stage: Stage) -> None:
    """A tenth of all requests (watches, LISTs, Bindings, PV updates, events, peering) lose their connection, half
    of them after the API server has done the work."""
    rules = (Rule("reset", rate=0.05), Rule("reset", rate=0.05, after_forward=True))
    _run(faulted, stage, "connection resets (10% of requests)", Faults(rules=rules), min_fired={"reset": 1})


def test_stalled_binding_responses(faulted: Faulted, stage: Stage) -> None:
    """Three Bindings reach the API server (the pods get bound) and their answers never come: the operator's client
    gives up after its timeout and finds the pods bound where it chose (a GET), without forgetting them first."""
    rules = (Rule("stall", BIND, rate=0.5, after_forward=True, seconds=60, limit=3),)
    found_before = len(faulted.operator.log_lines("found bound to"))

    def given_up() -> None:
        """Recovery includes the three Bindings' end: the operator's client gives up after its 30 s, and
        DefaultBinder's GET finds each pod bound to the node it chose (the assumption never left the cache)."""
        wait_for(
            lambda: len(faulted.operator.log_lines("found bound to")) - found_before >= 3,
            timeout=90,
            interval=0.5,
            message="the stalled Bindings never ended as found bound",
        )

    _run(
        faulted,
        stage,
        "stalled Binding responses (3, beyond the client timeout)",
        Faults(rules=rules),
        settled_also=given_up,
        min_fired={"stall-after": 3},
    )


def test_server_errors_on_binds(faulted: Faulted, stage: Stage) -> None:
    """A quarter of the Bindings answered 500 without reaching the API server, and some answered 504 after it bound
    the pod (an API server timing out on etcd that wrote anyway)."""
    rules = (
        Rule("status", BIND, rate=0.25, status=500),
        Rule("status", BIND, rate=0.1, status=504, after_forward=True),
    )
    _run(faulted, stage, "5xx on binds (25% 500, 10% 504 after the write)", Faults(rules=rules), min_fired={"500": 1})


def test_conflicts_on_binds(faulted: Faulted, stage: Stage) -> None:
    """Bindings answered 409 Conflict: some replayed after the API server bound the pod (its real answer to a second
    Binding, "already assigned"), some injected before it saw them (the pod is still unbound: dropping it until
    its next watch event would lose it, since no event comes)."""
    rules = (
        Rule("status", BIND, rate=0.15, status=409, after_forward=True),
        Rule("status", BIND, rate=0.15, status=409),
    )
    _run(faulted, stage, "409 on binds (15% after the write, 15% before)", Faults(rules=rules), min_fired={"409": 1})


def test_throttled_with_retry_after(faulted: Faulted, stage: Stage) -> None:
    """API Priority and Fairness says 429 with Retry-After to a third of the writes (Bindings, status patches,
    events, PV updates)."""
    rules = (Rule("status", r"^(POST|PUT|PATCH) ", rate=0.3, status=429, retry_after=1),)
    _run(faulted, stage, "429 with Retry-After: 1 on 30% of writes", Faults(rules=rules), min_fired={"429": 1})


def test_watch_streams_cut(faulted: Faulted, stage: Stage) -> None:
    """Every watch stream is reset 1.5 s after it starts, and all open ones once more mid-burst."""

    def cut() -> str:
        time.sleep(1.0)
        return f"{faulted.proxy.cut_watches()} open watch streams cut mid-burst"

    _run(
        faulted,
        stage,
        "watch streams cut (each after 1.5 s)",
        Faults(cut_watches_after=1.5),
        during=cut,
        min_fired={"watch-cut": 3},
    )


def test_watches_answered_gone_in_a_storm_while_pods_are_deleted(faulted: Faulted, stage: Stage) -> None:
    """Every watch request answered 410 Gone (the operator re-lists, again and again), the open streams cut, and
    bound pods deleted meanwhile: their room must be seen free again (a re-list that misses the deletions would
    leave the pending pods waiting for room that exists)."""
    core, namespace = faulted.cluster.core, stage.namespace
    deleted = 5

    def delete_bound() -> str:
        wait_for(lambda: sum(1 for n in wait_nodes(core, namespace) if n) >= 20, timeout=30, interval=0.2)
        faulted.proxy.cut_watches()
        bound = [name for name, node in _pod_nodes(core, namespace).items() if node and name.startswith("burst-")]
        time.sleep(0.5)
        for name in bound[:deleted]:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        return f"{deleted} bound pods deleted during the storm"

    faults = Faults(rules=(Rule("gone", WATCH, rate=0.9),))
    # The deleted pods' room goes to pending ones: still FITS bound, of BURST - deleted pods.
    _run(
        faulted,
        stage,
        "410 Gone storm on watches (90%), 5 bound pods deleted",
        faults,
        during=delete_bound,
        deleted=deleted,
        min_fired={"gone": 3},
    )


def _pod_nodes(core: client.CoreV1Api, namespace: str) -> dict[str, str | None]:
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(namespace).items}


def wait_nodes(core: client.CoreV1Api, namespace: str) -> list[str | None]:
    return list(_pod_nodes(core, namespace).values())


# ---- the record --------------------------------------------------------------------------------------------


def _record(outcomes: list[Outcome]) -> None:
    if not outcomes:
        return
    record = {
        "what": "tests/e2e/test_operator_faults.py: faults between the operator and kube-apiserver (issue 39)",
        "machine": _machine(),
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "burst": {
            "scale": soak_scale(),
            "nodes": NODES,
            "node_cpu_m": NODE_CPU,
            "pod_cpu_m": POD_CPU,
            "fit": FITS,
            "pods": BURST,
            "claims": CLAIMS,
        },
        "scenarios": [asdict(o) for o in outcomes],
    }
    print("\nfault scenarios:\n" + json.dumps(record, indent=1))
    path = os.environ.get(RECORD_ENV)
    if path:
        Path(path).write_text(json.dumps(record, indent=1) + "\n")


def _commit() -> str:
    """HEAD, and whether the operator or these tests differ from it."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "operator", "tests/e2e"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{rev} + uncommitted changes" if dirty else rev


def _machine() -> str:
    model = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {len(os.sched_getaffinity(0))} CPUs, Python {platform.python_version()}"
