"""The built image (`make image`) against the real control plane, run exactly as the Helm chart runs it.

Why: users run the image, not the venv. kwok nodes run no containers, so podman plays the kubelet: each
StatefulSet replica of a ``helm install``-ed release is a podman container with the command, arguments and
environment of the chart's rendered pod template, its read-only root filesystem (plus the chart's /tmp
emptyDir as a tmpfs), uid/gid 10001, every capability dropped, no privilege escalation, and a TokenRequest
token of the chart's ServiceAccount as its only credential.

Host networking (``--network host``: the control plane listens on the host's loopback) makes two
differences, both outside the chart's arguments: the replicas share the host's ports, so each gets its own
metrics and health port through the chart's values; and kopf's in-cluster login dials
``https://kubernetes.default.svc`` on port 443, which the host has not, so the operator gets the same token
and CA as a kubeconfig (``KUBECONFIG``; kopf's fallback login) instead of the pod's mounted account. The
`helm test` check reads the mounted account and KUBERNETES_SERVICE_HOST/PORT as in a pod.

What it proves: the profile turns Ready, a pod is bound with a ``Scheduled`` event, the chart's `helm test`
check (templates/tests/pod.yaml, run in the same image with the hook's own ServiceAccount) passes once the
replicas are up, and when the active container is killed the standby takes over (a new pod is bound) while
the check then reports the dead replica. Needs podman and the image (``make image``; the Makefile exports
KOPF_SCHEDULER_IMAGE and CONTAINERS_CONF); a missing image fails the test with that hint.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from kopf_scheduler._version import __version__
from tests.conftest import Cluster, NodeFactory
from tests.e2e.operator_process import (
    delete_profile,
    pod_events,
    pod_manifest,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)
from tests.e2e.test_helm import CHART_CRDS, Release, _established
from tests.unit.test_chart import render

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("KOPF_SCHEDULER_IMAGE", f"localhost/kopf-scheduler:{__version__}")
CONTAINERS_CONF = os.environ.get("CONTAINERS_CONF", str(REPO_ROOT / "deploy" / "containers.conf"))
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Where the operator's token-only kubeconfig is mounted (see the module docstring).
KUBECONFIG_DIR = "/var/run/secrets/kopf-scheduler-e2e"
LIFETIME = 10  # the peering lifetime: how long a killed replica still counts as alive


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": CONTAINERS_CONF}
    result = subprocess.run(["podman", *args], capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def image() -> str:
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: `make image` installs it and builds the image")
    if podman("image", "exists", IMAGE, check=False).returncode != 0:
        pytest.fail(f"image {IMAGE} not built: run `make image`")
    labels = json.loads(podman("image", "inspect", IMAGE).stdout)[0]["Config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__, "a stale image: run `make image`"
    assert labels["org.opencontainers.image.title"] == "kopf-scheduler"
    return IMAGE


@pytest.fixture
def release(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Release]:
    rel = Release(f"ki{secrets.token_hex(3)}", namespace, cluster.kubeconfig, tmp_path / "helm")
    rel.helm_home.mkdir()
    yield rel
    rel.uninstall_without_hooks()
    delete_profile(cluster.api, rel.profile(), force=True)
    # The hook's cluster-scoped RBAC, applied by hand in the test (its namespaced objects go with the namespace).
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    with contextlib.suppress(ApiException):
        rbac.delete_cluster_role_binding(f"{rel.fullname}-test")
    with contextlib.suppress(ApiException):
        rbac.delete_cluster_role(f"{rel.fullname}-test")


@pytest.fixture
def containers() -> Iterator[list[str]]:
    """Names of the podman containers a test starts; removed afterwards, their log tails printed first
    (pytest shows them when the test failed)."""
    names: list[str] = []
    yield names
    for name in names:
        print(f"---- podman logs {name}\n{container_log(name, tail=80)}")
        podman("rm", "--force", "--time", "0", name, check=False)


def container_log(name: str, tail: int | None = None) -> str:
    logs = podman("logs", *(["--tail", str(tail)] if tail else []), name, check=False)
    return logs.stdout + logs.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service_account_dir(cluster: Cluster, rel: Release, account: str, path: Path, server: str) -> Path:
    """What the kubelet mounts into a pod: a TokenRequest token of ``account``, the cluster CA, the namespace;
    plus ``kubeconfig``, the same token and CA for ``server`` and nothing else."""
    token = rel.kubectl("create", "token", account, "--namespace", rel.namespace, "--duration", "1h").stdout.strip()
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    entry = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    if "certificate-authority-data" in entry:
        ca = base64.b64decode(entry["certificate-authority-data"]).decode()
    else:
        ca = (cluster.kubeconfig.parent / entry["certificate-authority"]).read_text()
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca.encode()).decode()},
            }
        ],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": "c", "user": account}}],
        "current-context": account,
    }
    path.mkdir(mode=0o755)
    files = (("token", token), ("ca.crt", ca), ("namespace", rel.namespace), ("kubeconfig", yaml.safe_dump(kubeconfig)))
    for name, text in files:
        (path / name).write_text(text)
        (path / name).chmod(0o644)  # readable by the container's uid 10001
    return path


def podman_run_args(
    pod: Mapping[str, Any],
    pod_name: str,
    secrets_dir: Path,
    server: str,
    *,
    in_cluster: bool,
    pod_namespace: str = "default",
) -> list[str]:
    """``podman run`` options for the pod spec's one container, as a kubelet would run it (host network); the
    downward API's ``metadata.name`` and ``metadata.namespace`` are ``pod_name`` and ``pod_namespace``.

    ``in_cluster``: the account mounted where a pod has it, with KUBERNETES_SERVICE_HOST/PORT; otherwise the
    same token and CA as KUBECONFIG (kopf's in-cluster login needs kubernetes.default.svc:443).
    """
    (container,) = pod["containers"]
    pod_sc, sc = pod.get("securityContext", {}), container.get("securityContext", {})
    user, group = sc.get("runAsUser", pod_sc.get("runAsUser")), sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    assert user, "the chart must run as a non-root uid"
    options = ["--network", "host", "--user", f"{user}:{group or user}"]
    if sc.get("readOnlyRootFilesystem"):
        options += ["--read-only", "--read-only-tmpfs=false"]  # only the chart's own volumes are writable
    for capability in sc.get("capabilities", {}).get("drop", []):
        options += ["--cap-drop", capability]
    if sc.get("allowPrivilegeEscalation") is False:
        options += ["--security-opt", "no-new-privileges"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        assert "emptyDir" in volume, f"volume {mount['name']}: only emptyDir is mapped (to a tmpfs)"
        size = volume["emptyDir"].get("sizeLimit", "64Mi").replace("Mi", "m")
        options += ["--tmpfs", f"{mount['mountPath']}:rw,size={size},mode=1777"]
    if in_cluster:
        host_port = urlsplit(server)
        env = {"KUBERNETES_SERVICE_HOST": str(host_port.hostname), "KUBERNETES_SERVICE_PORT": str(host_port.port)}
        options += ["--volume", f"{secrets_dir}:{SERVICE_ACCOUNT_DIR}:ro"]
    else:
        env = {"KUBECONFIG": f"{KUBECONFIG_DIR}/kubeconfig"}
        options += ["--volume", f"{secrets_dir}:{KUBECONFIG_DIR}:ro"]
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            # As rendered, or as the API server returns it (with the defaulted apiVersion).
            field_ref = item["valueFrom"]["fieldRef"]
            downward = {"metadata.name": pod_name, "metadata.namespace": pod_namespace}
            assert field_ref["fieldPath"] in downward, item
            assert field_ref.get("apiVersion", "v1") == "v1", item
            env[item["name"]] = downward[field_ref["fieldPath"]]
    for name, value in env.items():
        options += ["--env", f"{name}={value}"]
    command = container.get("command") or []
    if command:
        options += ["--entrypoint", json.dumps(command)]
    return options


def run_container(image: str, name: str, options: list[str], args: list[str], *, detach: bool) -> Any:
    run = ["run", "--name", name, *(["--detach"] if detach else ["--rm"]), *options, image, *args]
    return podman(*run, check=detach, timeout=180)


def healthz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def bind_to(cluster: Cluster, namespace: str, pod: str, node: str) -> None:
    """What kube-scheduler would do for the chart's own pods: a Binding (kwok then reports them Ready)."""
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod), target=client.V1ObjectReference(kind="Node", name=node)
    )
    cluster.core.create_namespaced_binding(namespace, body, _preload_content=False)


def test_the_image_runs_as_the_chart_runs_it_and_fails_over(
    cluster: Cluster,
    namespace: str,
    release: Release,
    kwok_nodes: NodeFactory,
    image: str,
    containers: list[str],
    tmp_path: Path,
) -> None:
    profile = release.profile()
    values = {"peering": {"name": release.peering, "priorityBase": 100, "lifetime": LIFETIME},
              "profiles": [{"name": profile}]}  # fmt: skip
    release.install(values)
    for crd in CHART_CRDS:
        wait_for(lambda crd=crd: _established(cluster.api, crd), timeout=30, message=f"CRD {crd} not Established")
    nodes = [kwok_nodes(cpu="4", memory="8Gi", pods="20") for _ in range(2)]
    server = cluster.api.configuration.host
    operator_secrets = service_account_dir(cluster, release, release.fullname, tmp_path / "operator-sa", server)

    # Each replica: the chart's pod template (rendered with this replica's host ports) in a container.
    replicas = []
    for ordinal in range(2):
        ports = {"metrics": {"port": free_port()}, "health": {"port": free_port()}}
        docs = render(values | ports, release=release.name, namespace=namespace)
        statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
        pod_spec = statefulset["spec"]["template"]["spec"]
        pod_name = f"{release.fullname}-{ordinal}"
        container_name = f"{release.name}-{ordinal}"
        options = podman_run_args(
            pod_spec, pod_name, operator_secrets, server, in_cluster=False, pod_namespace=namespace
        )
        run_container(image, container_name, options, pod_spec["containers"][0]["args"], detach=True)
        containers.append(container_name)
        replicas.append((pod_name, container_name, ports["health"]["port"]))
    for pod_name, container_name, health_port in replicas:
        wait_for(lambda port=health_port: healthz(port), timeout=60, message=f"{container_name}: no /healthz")
        # The kubelet's part: the probe passed, so the pod (bound to a kwok node) turns Ready.
        bind_to(cluster, namespace, pod_name, nodes[int(pod_name.rsplit("-", 1)[1])])
    inspect = json.loads(podman("inspect", replicas[0][1]).stdout)[0]
    assert inspect["Config"]["User"] == "10001:10001"
    assert inspect["HostConfig"]["ReadonlyRootfs"] is True
    assert not inspect["EffectiveCaps"]

    # The operator's work: profile Ready, a pod bound with its Scheduled event.
    wait_profile_status(cluster.api, profile, ready=True, timeout=60)
    cluster.core.create_namespaced_pod(namespace, pod_manifest("first", profile, cpu="500m"))
    assert wait_pods_bound(cluster.core, namespace, ["first"], timeout=60)["first"] in nodes
    scheduled = wait_for(lambda: pod_events(cluster.api, namespace, "first", reason="Scheduled"), timeout=30)
    assert scheduled[0].reporting_controller == profile

    # The `helm test` hook's command, in the image, with the hook's own ServiceAccount and RBAC; its health
    # checks only (no probe pod: tests/e2e/test_helm_lifecycle.py runs `helm test` whole).
    hook_docs = render(values, release=release.name, namespace=namespace, include_tests=True)
    hook_docs = [d for d in hook_docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    manifest = tmp_path / "hook-rbac.yaml"
    manifest.write_text(yaml.safe_dump_all([d for d in hook_docs if d["kind"] not in ("Pod", "SchedulerProfile")]))
    release.kubectl("apply", "-f", str(manifest))
    hook_pod = next(d for d in hook_docs if d["kind"] == "Pod")
    hook_secrets = service_account_dir(cluster, release, f"{release.fullname}-test", tmp_path / "hook-sa", server)
    hook_options = podman_run_args(
        hook_pod["spec"], hook_pod["metadata"]["name"], hook_secrets, server, in_cluster=True
    )
    hook_args = [
        a for a in hook_pod["spec"]["containers"][0]["args"] if not a.startswith(("--timeout=", "--probe-pod="))
    ]

    def helm_test(timeout: int) -> subprocess.CompletedProcess[str]:
        args = [*hook_args, f"--timeout={timeout}"]
        return run_container(image, f"{release.name}-test", hook_options, args, detach=False)  # type: ignore[no-any-return]

    passed = helm_test(60)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert f"ok   StatefulSet {release.fullname}: 2/2 replicas Ready" in passed.stdout
    assert f"one active peer, {release.fullname}-0 (priority 100), of 2 live" in passed.stdout

    # Failover: kill the active container; the standby resumes once the dead peer's lifetime is over.
    podman("kill", "--signal", "KILL", replicas[0][1])
    cluster.core.create_namespaced_pod(namespace, pod_manifest("after-failover", profile, cpu="500m"))
    bound = wait_pods_bound(cluster.core, namespace, ["after-failover"], timeout=LIFETIME + 60)
    assert bound["after-failover"] in nodes
    wait_for(lambda: pod_events(cluster.api, namespace, "after-failover", reason="Scheduled"), timeout=30)
    standby_log = container_log(replicas[1][1])
    assert "Resuming operations" in standby_log, standby_log[-2000:]
    assert podman("inspect", "--format", "{{.State.Running}}", replicas[1][1]).stdout.strip() == "true"

    # The hook now reports the dead replica (its pod still looks Ready to the API: only peering knows).
    failed = helm_test(0)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"FAIL ClusterKopfPeering {release.peering}: no live peer for {release.fullname}-0" in failed.stdout
