"""``make demo``: a full local cluster with six kwok nodes in three zones, kopf-scheduler and the examples.

Last, a gang (``examples/gang-scheduling.yaml``, applied in two steps): its profile, its PodGroup and all of its
pods but the last, which wait (no node, no event: GangScheduling's PreEnqueue holds them for the quorum); then the
last pod, and the whole gang binds at once in one pod-group cycle.

The cluster's files (kubeconfig, certs, component logs) live in ``.cluster/demo`` in the repository so the
printed ``KUBECONFIG`` path is stable between runs and the logs survive for debugging after Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml
from kubernetes import client

from tools.aggregation import register_operator, wait_available
from tools.localcluster import (
    REPO_ROOT,
    LocalCluster,
    child_preexec,
    create_kwok_nodes,
    free_port,
    kube_version,
    kwok_node,
    wait_nodes_ready,
)

ZONES = ("a", "b", "c")
GANG_EXAMPLE = REPO_ROOT / "examples" / "gang-scheduling.yaml"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def _is_manifest(path: Path) -> bool:
    """Every YAML document in the file is a Kubernetes object (other YAML, e.g. Helm values, is skipped)."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, yaml.YAMLError):
        return False
    return bool(docs) and all(isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in docs)


def _manifests(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    candidates = sorted(p for p in directory.rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())
    return [p for p in candidates if _is_manifest(p)]


def _kubectl(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run([str(cluster.kubectl), *args], env=env, text=True, capture_output=True)


def _apply_dir(cluster: LocalCluster, directory: Path) -> bool:
    """``kubectl apply`` every manifest under ``directory`` (silently nothing if there are none)."""
    files = _manifests(directory)
    if not files:
        return True
    args = ["apply"]
    for path in files:
        args += ["-f", str(path)]
    result = _kubectl(cluster, *args)
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        print(f"!! applying {directory.name}/ failed:\n{result.stderr}", file=sys.stderr)
        return False
    return True


def _wait_crds_established(cluster: LocalCluster) -> None:
    result = _kubectl(cluster, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    if result.returncode != 0:
        print(f"!! CRDs not Established:\n{result.stderr}", file=sys.stderr)


def _start_operator(cluster: LocalCluster, *, metrics_port: int) -> subprocess.Popen[bytes]:
    """``kopf-scheduler run`` as a real process against the demo cluster; its log goes next to the others."""
    log = (cluster.work_dir / "logs" / "kopf-scheduler.log").open("wb")
    command = [
        str(Path(sys.executable).with_name("kopf-scheduler")),
        "run",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--metrics-port",
        str(metrics_port),
        "--health-port",
        str(free_port()),
        "--bind-address",
        "127.0.0.1",
    ]
    parent = os.getpid()
    return subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: child_preexec(parent),  # dies with the demo, even on SIGKILL
    )


def _wait_for(what: str, condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    print(f"!! timed out waiting for {what}", file=sys.stderr)
    return False


def _profiles_ready(cluster: LocalCluster) -> bool:
    result = _kubectl(cluster, "get", "sp", "-o", "jsonpath={.items[*].status.conditions[0].status}")
    statuses = result.stdout.split()
    return result.returncode == 0 and bool(statuses) and all(s == "True" for s in statuses)


def _workloads_settled(core: client.CoreV1Api) -> bool:
    """Every example pod is either bound or has been explained by a FailedScheduling event."""
    pods = core.list_namespaced_pod("default").items
    explained = {
        e.involved_object.name for e in core.list_namespaced_event("default").items if e.reason == "FailedScheduling"
    }
    return bool(pods) and all(p.spec.node_name or p.metadata.name in explained for p in pods)


def _show(cluster: LocalCluster, title: str, *args: str) -> None:
    print(f"\n$ kubectl {' '.join(args)}    # {title}", flush=True)
    result = _kubectl(cluster, *args)
    sys.stdout.write(result.stdout or result.stderr)


def _show_explain(pod: str, *, kubeconfig: Path, why: str) -> None:
    """``kopf-scheduler explain``: what kube-scheduler's histogram cannot say, node by node.

    Through the API server, as in a cluster: the operator is registered as the explain.kopf-scheduler.io
    APIService (:func:`_register_operator`)."""
    _show_cli(["explain", pod], why, kubeconfig)


def _register_operator(api: client.ApiClient, *, metrics_port: int) -> None:
    """The operator (a process on 127.0.0.1) as the aggregated API explain.kopf-scheduler.io/v1alpha1, so that
    ``kopf-scheduler explain NS/POD`` and ``kubectl get podexplanation`` work with the printed KUBECONFIG."""
    register_operator(api, port=metrics_port)
    try:
        wait_available(api, timeout=60)
    except TimeoutError as e:
        url = f"https://127.0.0.1:{metrics_port}"
        print(
            f"!! {e}: ask the operator directly: explain NS/POD --url {url} --insecure-skip-tls-verify", file=sys.stderr
        )


def _show_cli(args: list[str], why: str, kubeconfig: Path) -> None:
    """Run one ``kopf-scheduler`` command against the demo cluster and print it with its output."""
    print(f"\n$ kopf-scheduler {' '.join(args)}    # {why}", flush=True)
    command = [str(Path(sys.executable).with_name("kopf-scheduler")), *args, "--kubeconfig", str(kubeconfig)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    sys.stdout.write(result.stdout or result.stderr)
    if not (result.stdout or result.stderr).endswith("\n"):
        sys.stdout.write("\n")


def _a_bound_pod(core: client.CoreV1Api, scheduler_name: str) -> str | None:
    """``default/<name>`` of a bound pod of the profile (None if there is none yet)."""
    for pod in core.list_namespaced_pod("default").items:
        if pod.spec.scheduler_name == scheduler_name and pod.spec.node_name:
            return f"default/{pod.metadata.name}"
    return None


def _apply_docs(cluster: LocalCluster, docs: Sequence[dict[str, object]], name: str) -> bool:
    """``kubectl apply`` of these manifests (written next to the cluster's files as ``name``), shown as run."""
    path = cluster.work_dir / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    print(f"\n$ kubectl apply -f {path.name}", flush=True)
    result = _kubectl(cluster, "apply", "-f", str(path))
    sys.stdout.write(result.stdout or result.stderr)
    return result.returncode == 0


def _gang_demo(cluster: LocalCluster, core: client.CoreV1Api) -> None:
    """A gang that waits for its last member and then binds at once (``examples/gang-scheduling.yaml``)."""
    docs = [d for d in yaml.safe_load_all(GANG_EXAMPLE.read_text()) if d]
    pods = [d for d in docs if d["kind"] == "Pod"]
    group = next(d for d in docs if d["kind"] == "PodGroup")
    names = [p["metadata"]["name"] for p in pods]
    quorum = group["spec"]["schedulingPolicy"]["gang"]["minCount"]
    print(f"\n--- a gang: PodGroup {group['metadata']['name']} (minCount {quorum}), {len(pods)} pods ---", flush=True)
    profile = [d for d in docs if d["kind"] == "SchedulerProfile"]
    if not _apply_docs(cluster, profile, "gang-profile.yaml"):
        return
    _wait_for("the gang-scheduling profile Ready", lambda: _profiles_ready(cluster), 60)
    if not _apply_docs(cluster, [group, *pods[:-1]], "gang-without-its-last-pod.yaml"):
        return
    time.sleep(3)  # time enough for the operator to see them: they stay unbound, unreported
    _show(cluster, f"{len(pods) - 1} of {quorum}: they wait, no node", "get", "pods", *names[:-1], "-o", "wide")
    selector = f"involvedObject.name={names[0]}"
    _show(cluster, "and nothing reported: PreEnqueue holds them", "get", "events", "--field-selector", selector)
    why = "the gang's state: members against minCount, the PreEnqueue verdict"
    _show_explain(f"default/{names[0]}", kubeconfig=cluster.kubeconfig, why=why)
    if not _apply_docs(cluster, pods[-1:], "gang-last-pod.yaml"):
        return

    def all_bound() -> bool:
        return all(core.read_namespaced_pod(name, "default").spec.node_name for name in names)

    _wait_for("the gang to bind", all_bound, 60)
    _show(cluster, "the last pod came: all bound at once", "get", "pods", *names, "-o", "wide")
    log = cluster.work_dir / "logs" / "kopf-scheduler.log"
    cycle = f"Successfully scheduled a pod group default/{group['metadata']['name']}"
    lines = [line for line in log.read_text(errors="replace").splitlines() if cycle in line]
    print(f"\n$ grep '{cycle}' {log.name}    # one pod-group cycle placed them all", flush=True)
    print("\n".join(lines), flush=True)
    columns = "NAME:.metadata.name,CONDITION:.status.conditions[0].type,STATUS:.status.conditions[0].status"
    _show(
        cluster,
        "the group's condition",
        "get",
        "podgroup",
        group["metadata"]["name"],
        "-o",
        f"custom-columns={columns}",
    )
    selector = f"involvedObject.name={names[-1]}"
    _show(cluster, "the last pod's events", "get", "events", "--field-selector", selector)


def _instructions(cluster: LocalCluster, *, metrics_port: int) -> str:
    kubectl = cluster.kubectl
    explain = Path(sys.executable).with_name("kopf-scheduler")
    # Only point at SchedulerProfiles once the CRD is part of the repository (crds/).
    crd_hint = f"    {kubectl} get crd,sp\n" if _manifests(REPO_ROOT / "crds") else ""
    return f"""
The local control plane is up (etcd, kube-apiserver, kube-controller-manager, kwok) on 127.0.0.1.
Component logs: {cluster.work_dir / "logs"}

    export KUBECONFIG={cluster.kubeconfig}
    export PATH={cluster.bin_dir}:$PATH   # kubectl/helm of the pinned release (v{kube_version()})

Try:
    {kubectl} get nodes -L topology.kubernetes.io/zone
{crd_hint}    {kubectl} get pods -o wide --sort-by=.spec.nodeName
    {kubectl} get events --field-selector reason=FailedScheduling
    {kubectl} describe pod too-big
    {explain} explain default/too-big      # per node, through the API server (the explain APIService)
    {kubectl} get podexplanation too-big -o yaml   # the same account with kubectl alone
    {explain} explain default/too-big --url https://127.0.0.1:{metrics_port} --insecure-skip-tls-verify   # direct
    {explain} what-if --profile default-equivalent --pod default/too-big   # where it would go now (read-only)
    {kubectl} edit sp bin-packing          # change the profile: the next pods follow it, no restart
    {kubectl} scale deployment batch --replicas=10
    {kubectl} get podgroups                # the gang (examples/gang-scheduling.yaml): its PodGroupScheduled condition

The scheduler's own log: {cluster.work_dir / "logs" / "kopf-scheduler.log"}

Press Ctrl-C to stop everything.
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=REPO_ROOT / ".cluster" / "demo")
    parser.add_argument("--nodes-only", action="store_true", help="do not apply crds/ and examples/")
    args = parser.parse_args(argv)

    print("starting the local control plane ...", flush=True)
    started = time.monotonic()
    with LocalCluster("full", work_dir=args.work_dir) as cluster:
        api = cluster.api_client()
        core = client.CoreV1Api(api)
        names = create_kwok_nodes(
            core,
            [
                kwok_node(
                    f"node-{zone}{i}",
                    cpu="4",
                    memory="16Gi",
                    labels={"topology.kubernetes.io/zone": f"zone-{zone}", "topology.kubernetes.io/region": "demo"},
                )
                for zone in ZONES
                for i in (1, 2)
            ],
        )
        wait_nodes_ready(core, names, timeout=60)
        operator: subprocess.Popen[bytes] | None = None
        metrics_port = free_port()
        if not args.nodes_only:
            if _apply_dir(cluster, REPO_ROOT / "crds") and _manifests(REPO_ROOT / "crds"):
                _wait_crds_established(cluster)
            print("starting kopf-scheduler ...", flush=True)
            operator = _start_operator(cluster, metrics_port=metrics_port)
            _register_operator(api, metrics_port=metrics_port)
            _apply_dir(cluster, REPO_ROOT / "examples" / "profiles")
            _wait_for("SchedulerProfiles Ready", lambda: _profiles_ready(cluster), 60)
            _apply_dir(cluster, REPO_ROOT / "examples" / "workloads")
            _wait_for("the example pods to be scheduled or explained", lambda: _workloads_settled(core), 90)
            _show(cluster, "the profiles, their score plugins and weights", "get", "sp")
            _show(cluster, "where each profile put its pods", "get", "pods", "-o", "wide", "--sort-by=.spec.nodeName")
            _show(cluster, "why the others wait", "get", "events", "--field-selector", "reason=FailedScheduling")
            kubeconfig = cluster.kubeconfig
            why = "per node, per plugin"
            _show_explain("default/too-big", kubeconfig=kubeconfig, why=why)
            bound = _a_bound_pod(core, "bin-packing")
            if bound is not None:
                why = "why there: the winner's and runners-up's scores"
                _show_explain(bound, kubeconfig=kubeconfig, why=why)
            what_if = ["what-if", "--profile", "default-equivalent", "--pod", "default/too-big"]
            _show_cli(what_if, "the pending pod under another profile, offline (get/list only)", kubeconfig)
            _gang_demo(cluster, core)
        print(f"\nready in {time.monotonic() - started:.1f}s", flush=True)
        print(_instructions(cluster, metrics_port=metrics_port), flush=True)
        try:
            while True:
                if operator is not None and operator.poll() is not None:
                    print(f"!! kopf-scheduler exited ({operator.returncode}); see its log", file=sys.stderr)
                    return 1
                dead = cluster.dead_components()
                if dead:
                    print(f"!! {', '.join(dead)} exited; tearing down\n{cluster.log_tails()}", file=sys.stderr)
                    return 1
                time.sleep(1)
        except KeyboardInterrupt:
            print("\nstopping kopf-scheduler and the local control plane ...", flush=True)
        finally:
            if operator is not None:
                operator.terminate()
                try:
                    operator.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    operator.kill()
            api.close()
    print("stopped.", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # interrupted during start-up: the cluster has already been torn down
        sys.exit(130)
