"""The chart's life cycle against the real control plane: `helm test`, an upgrade whose CRD changed, and an uninstall
with profiles present, with the chart's hooks running in the built image.

Why: a user installs, tests, upgrades and uninstalls with Helm alone. `helm test` must prove the release schedules
(a probe pod bound through it, not only replicas Ready); `helm upgrade` must serve a changed CRD before the
operator rolls (Helm never upgrades crds/: the chart's pre-upgrade hook applies it), over a CRD an older chart
installed; and `helm uninstall` must not leave a
SchedulerProfile holding the operator's finalizer with no operator left to remove it (`kubectl delete sp` would
hang): its pre-delete hook stops the replicas, then removes the finalizer.

As in tests/e2e/test_image.py, nothing in the local control plane runs or schedules the chart's own pods, so the
test plays both for them: the replica is the operator as a process whose only credential is a token of the
chart's ServiceAccount, with its pod's name as peering identity, and its pod is bound to a kwok node (kwok reports
it Ready); when that pod goes, the process is stopped, as a kubelet stops a deleted pod's container. Each hook
pod Helm creates (the `helm test` Pod, the pre-upgrade and pre-delete Jobs' pods) runs in the image under podman
with its own ServiceAccount's token mounted where a pod has it, then is bound to a kwok node; its end is reported
in its status (kwok completes a Job's pod itself). Helm itself runs unmodified and waits for them as in a real
cluster. Needs podman and the image (`make image`), as test_image.py.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import Cluster, NodeFactory
from tests.e2e.operator_process import (
    PROFILE_FINALIZER,
    OperatorProcess,
    apply_crds,
    delete_profile,
    get_profile,
    kubectl_apply,
    pod_events,
    wait_for,
    wait_profile_status,
)
from tests.e2e.test_helm import (
    CHART_CRDS,
    PROFILE_CRD,
    Release,
    _chart_pods,
    _established,
    _read,
    _release_objects,
    token_kubeconfig,
)
from tests.e2e.test_image import bind_to, image, podman_run_args, run_container, service_account_dir
from tests.unit.test_chart import CHART, pinned_binary

__all__ = ["image"]  # the module-scoped fixture of test_image.py: the built image, or a failure saying how

#: Seconds Helm may wait for a hook (and so for this test to play the hook pod's kubelet).
HOOK_TIMEOUT = "240s"


@pytest.fixture
def release(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Release]:
    rel = Release(f"kl{secrets.token_hex(3)}", namespace, cluster.kubeconfig, tmp_path / "helm")
    rel.helm_home.mkdir()
    yield rel
    rel.uninstall_without_hooks()
    for name in (rel.profile(), rel.profile("mine"), f"{rel.fullname}-probe"):
        delete_profile(cluster.api, name, force=True)
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    for hook in ("test", "pre-delete"):  # cluster-scoped hook objects a failed run keeps
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(f"{rel.fullname}-{hook}")
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(f"{rel.fullname}-{hook}")


class Kubelet:
    """What kube-scheduler and a kubelet would do for the release's pods in this control plane (module docstring)."""

    def __init__(self, cluster: Cluster, rel: Release, image: str, node: str, tmp_path: Path) -> None:
        self.cluster, self.rel, self.image, self.node, self.tmp_path = cluster, rel, image, node, tmp_path
        self.server = cluster.api.configuration.host

    def pod_named(self, name: str, *, timeout: float = 120) -> Any:
        return wait_for(
            lambda: _read(self.cluster.core.read_namespaced_pod, name, self.rel.namespace),
            timeout=timeout,
            message=f"pod {name} not created",
        )

    def job_pod(self, job: str, *, timeout: float = 120) -> Any:
        def created() -> Any:
            pods = self.cluster.core.list_namespaced_pod(self.rel.namespace, label_selector=f"job-name={job}").items
            return pods[0] if pods else None

        return wait_for(created, timeout=timeout, message=f"no pod of Job {job}")

    def run(self, pod: Any, *, report_end: bool) -> subprocess.CompletedProcess[str]:
        """Run the pod's one container in the image under its ServiceAccount, then bind the pod; with
        ``report_end``, write its end into the pod's status (Succeeded or Failed, with the exit code)."""
        name = pod.metadata.name
        spec = self.cluster.api.sanitize_for_serialization(pod.spec)
        # The admission-added token volume (kube-api-access-*) is what ``mounted`` stands for.
        projected = {v["name"] for v in spec.get("volumes", []) if "projected" in v}
        spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] not in projected]
        for item in spec["containers"]:
            item["volumeMounts"] = [m for m in item.get("volumeMounts", []) if m["name"] not in projected]
        account = spec["serviceAccountName"]
        mounted = service_account_dir(
            self.cluster, self.rel, account, self.tmp_path / f"sa-{secrets.token_hex(3)}", self.server
        )
        options = podman_run_args(spec, name, mounted, self.server, in_cluster=True)
        container = f"{self.rel.name}-{secrets.token_hex(3)}"
        result: subprocess.CompletedProcess[str] = run_container(
            self.image, container, options, spec["containers"][0]["args"], detach=False
        )
        print(f"---- {name} ({account}): exit {result.returncode}\n{result.stdout}{result.stderr}")
        bind_to(self.cluster, self.rel.namespace, name, self.node)
        if report_end:
            self._report_end(name, spec["containers"][0]["name"], result.returncode)
        return result

    def _report_end(self, name: str, container: str, exit_code: int) -> None:
        core, namespace = self.cluster.core, self.rel.namespace
        wait_for(lambda: core.read_namespaced_pod(name, namespace).status.phase == "Running", timeout=30)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                      "startedAt": now, "finishedAt": now}  # fmt: skip
        status = {"phase": "Succeeded" if exit_code == 0 else "Failed",
                  "containerStatuses": [{"name": container, "image": self.image, "imageID": "", "ready": False,
                                         "restartCount": 0, "state": {"terminated": terminated}}]}  # fmt: skip
        core.patch_namespaced_pod_status(name, namespace, {"status": status})


def helm_in_background(rel: Release, *args: str) -> subprocess.Popen[str]:
    """A helm command that waits for hooks this test plays the kubelet for."""
    command = [pinned_binary("helm"), *args, "--namespace", rel.namespace]
    return subprocess.Popen(command, env=rel.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen[str], timeout: float = 180) -> str:
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output
    return output


def start_release(
    cluster: Cluster, rel: Release, kwok_nodes: NodeFactory, tmp_path: Path, values: dict[str, Any]
) -> tuple[OperatorProcess, str]:
    """Install the release with one replica and run that replica (module docstring); (its process, its node)."""
    rel.install({"replicas": 1, "peering": {"name": rel.peering, "priorityBase": 100, "lifetime": 10}, **values})
    for crd in CHART_CRDS:
        wait_for(lambda crd=crd: _established(cluster.api, crd), timeout=30, message=f"CRD {crd} not Established")
    node = kwok_nodes(cpu="4", memory="8Gi", pods="20")
    replica = f"{rel.fullname}-0"
    wait_for(lambda: _chart_pods(cluster, rel), timeout=60, message="the StatefulSet made no pod")
    bind_to(cluster, rel.namespace, replica, node)  # kwok reports it Ready
    token = rel.kubectl("create", "token", rel.fullname, "--namespace", rel.namespace, "--duration", "1h")
    kubeconfig = token_kubeconfig(cluster.kubeconfig, token.stdout.strip(), tmp_path / "chart-sa.kubeconfig")
    operator = OperatorProcess(
        kubeconfig, peering_name=rel.peering, peering_priority=100, identity=replica, create_peering=False,
        log_dir=tmp_path, name="replica-0", extra_args=["--peering-lifetime", "10"],
    )  # fmt: skip
    operator.start(timeout=60)
    operator.wait_log(r"cache reconciled", timeout=30)
    return operator, node


def test_helm_test_schedules_a_probe_pod_through_the_release(
    cluster: Cluster, release: Release, kwok_nodes: NodeFactory, image: str, tmp_path: Path
) -> None:
    operator, node = start_release(cluster, release, kwok_nodes, tmp_path, {})
    kubelet = Kubelet(cluster, release, image, node, tmp_path)
    probe = f"{release.fullname}-probe"
    try:
        helm = helm_in_background(release, "test", release.name, "--timeout", HOOK_TIMEOUT)
        check = kubelet.run(kubelet.pod_named(f"{release.fullname}-test"), report_end=True)
        assert check.returncode == 0, check.stdout + check.stderr
        assert f"ok   StatefulSet {release.fullname}: 1/1 replicas Ready" in check.stdout
        assert f"ok   probe: pod {probe} bound to {node} by {probe} in " in check.stdout
        output = finish(helm)
        assert f"TEST SUITE:     {release.name}" in output
        assert "Phase:          Succeeded" in output
        # The probe went through the chart's scheduler: its Scheduled event is the probe profile's.
        scheduled = pod_events(cluster.api, release.namespace, probe, reason="Scheduled")
        assert [event.reporting_controller for event in scheduled] == [probe]
        assert scheduled[0].note == f"Successfully assigned {release.namespace}/{probe} to {node}"
        # Nothing of the probe is left: its pod deleted by the check, its profile by Helm with the other test
        # objects once the test passed (the running operator removed its finalizer).
        assert _read(cluster.core.read_namespaced_pod, probe, release.namespace) is None
        wait_for(lambda: _profile(cluster, probe) is None, timeout=30, message=f"probe profile {probe} left")
    except BaseException:
        print(operator.log_tail(80))
        raise
    finally:
        operator.stop()


def _replica_pod_going(cluster: Cluster, rel: Release) -> bool:
    pod = _read(cluster.core.read_namespaced_pod, f"{rel.fullname}-0", rel.namespace)
    return pod is None or pod.metadata.deletion_timestamp is not None


def _profile(cluster: Cluster, name: str) -> dict[str, Any] | None:
    try:
        return get_profile(cluster.api, name)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def test_uninstall_with_profiles_present_leaves_nothing_behind(
    cluster: Cluster, release: Release, kwok_nodes: NodeFactory, image: str, tmp_path: Path
) -> None:
    chart_profile, mine = release.profile(), release.profile("mine")
    operator, node = start_release(cluster, release, kwok_nodes, tmp_path, {"profiles": [{"name": chart_profile}]})
    kubelet = Kubelet(cluster, release, image, node, tmp_path)
    manifest = {"apiVersion": "kopf-scheduler.io/v1alpha1", "kind": "SchedulerProfile", "metadata": {"name": mine},
                "spec": {}}  # fmt: skip
    applied = kubectl_apply(cluster.kubeconfig, manifest)
    assert applied.returncode == 0, applied.stderr
    for name in (chart_profile, mine):
        wait_profile_status(cluster.api, name, ready=True, timeout=60)
        assert PROFILE_FINALIZER in get_profile(cluster.api, name)["metadata"]["finalizers"]

    def stop_when_its_pod_goes() -> None:  # the kubelet's part: a deleted pod's container is stopped
        with contextlib.suppress(AssertionError):
            wait_for(lambda: _replica_pod_going(cluster, release), timeout=180)
        operator.stop()

    stopper = threading.Thread(target=stop_when_its_pod_goes, daemon=True)
    stopper.start()
    try:
        helm = helm_in_background(release, "uninstall", release.name, "--wait", "--timeout", HOOK_TIMEOUT)
        hook = kubelet.run(kubelet.job_pod(f"{release.fullname}-pre-delete"), report_end=False)
        assert hook.returncode == 0, hook.stdout + hook.stderr
        assert f"ok   StatefulSet {release.fullname}: scaled to 0" in hook.stdout
        assert f"ok   ClusterKopfPeering {release.peering}: live peers: none" in hook.stdout
        assert "ok   replica pods left: none" in hook.stdout
        assert f"{PROFILE_FINALIZER} removed from" in hook.stdout
        assert chart_profile in hook.stdout
        assert mine in hook.stdout
        assert f'release "{release.name}" uninstalled' in finish(helm)
    except BaseException:
        print(operator.log_tail(80))
        raise
    finally:
        stopper.join(timeout=200)
        operator.stop()

    # Nothing of the release is left, the hook's own objects included, and no profile waits on a finalizer.
    leftovers = {kind: obj is not None for kind, obj in _release_objects(cluster, release).items()}
    assert not any(leftovers.values()), leftovers
    assert not client.BatchV1Api(cluster.api).list_namespaced_job(release.namespace).items
    assert (
        _read(cluster.core.read_namespaced_service_account, f"{release.fullname}-pre-delete", release.namespace) is None
    )
    wait_for(lambda: _profile(cluster, chart_profile) is None, timeout=30, message="the chart's profile stays")
    kept = get_profile(cluster.api, mine)  # a profile the user made is the user's: kept, and free to go
    assert "deletionTimestamp" not in kept["metadata"]
    assert PROFILE_FINALIZER not in (kept["metadata"].get("finalizers") or [])
    started = time.monotonic()
    deleted = release.kubectl("delete", "sp", mine, "--timeout=30s", check=False)
    assert deleted.returncode == 0, deleted.stderr
    assert time.monotonic() - started < 15
    assert _profile(cluster, mine) is None
    assert _established(cluster.api, PROFILE_CRD)  # crds.keep


def test_upgrade_serves_a_changed_crd_before_the_operator_rolls(
    cluster: Cluster, release: Release, kwok_nodes: NodeFactory, image: str, tmp_path: Path
) -> None:
    custom = client.CustomObjectsApi(cluster.api)
    ext = client.ApiextensionsV1Api(cluster.api)
    node = kwok_nodes(cpu="4", memory="8Gi", pods="20")
    kubelet = Kubelet(cluster, release, image, node, tmp_path)
    profile = release.profile()
    try:
        # As an older chart (or an earlier test) left it: crds/ as Helm installed it, no field manager of ours.
        apply_crds(cluster.api)
        release.install({"peering": {"name": release.peering}})
        body = {"apiVersion": "kopf-scheduler.io/v1alpha1", "kind": "SchedulerProfile",
                "metadata": {"name": profile}, "spec": {"e2eExtra": "before"}}  # fmt: skip
        custom.create_cluster_custom_object("kopf-scheduler.io", "v1alpha1", "schedulerprofiles", body)
        assert "e2eExtra" not in get_profile(cluster.api, profile)["spec"]  # unknown to the CRD: pruned

        # The next chart version's CRD has the field. While Helm waits for the pre-upgrade hook, nothing of the
        # release has changed yet: the StatefulSet still runs the old template.
        statefulset = cluster.apps.read_namespaced_stateful_set(release.fullname, release.namespace)
        upgraded = _chart_with_an_extra_field(tmp_path / "chart", "0.1.1")
        helm = helm_in_background(release, "upgrade", release.name, str(upgraded), "--reuse-values",
                                  "--timeout", HOOK_TIMEOUT)  # fmt: skip
        job_pod = kubelet.job_pod(f"{release.fullname}-crds")
        waiting = cluster.apps.read_namespaced_stateful_set(release.fullname, release.namespace)
        assert waiting.metadata.generation == statefulset.metadata.generation
        assert waiting.spec.template.metadata.labels["helm.sh/chart"] == "kopf-scheduler-0.1.0"
        applied = kubelet.run(job_pod, report_end=False)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert f"ok   CRD {PROFILE_CRD}: applied (resourceVersion " in applied.stdout
        finish(helm)

        crd = ext.read_custom_resource_definition(PROFILE_CRD)
        spec = crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"]
        assert spec.properties["e2eExtra"].type == "string"
        assert "kopf-scheduler-chart" in {entry.manager for entry in crd.metadata.managed_fields}
        rolled = cluster.apps.read_namespaced_stateful_set(release.fullname, release.namespace)
        assert rolled.metadata.generation > statefulset.metadata.generation  # then the operator rolls
        assert rolled.spec.template.metadata.labels["helm.sh/chart"] == "kopf-scheduler-0.1.1"
        assert not client.BatchV1Api(cluster.api).list_namespaced_job(release.namespace).items  # hook-succeeded

        # The new field is served: stored and read back.
        patch = {"spec": {"e2eExtra": "after"}}
        custom.patch_cluster_custom_object("kopf-scheduler.io", "v1alpha1", "schedulerprofiles", profile, patch)
        assert get_profile(cluster.api, profile)["spec"]["e2eExtra"] == "after"
    finally:
        delete_profile(cluster.api, profile, force=True)
        release.uninstall_without_hooks()
        apply_crds(cluster.api)  # the CRD as the other tests expect it


def _chart_with_an_extra_field(path: Path, version: str) -> Path:
    """A copy of the chart at ``version`` whose SchedulerProfile CRD has one more spec field, ``e2eExtra``."""
    shutil.copytree(CHART, path)
    crd_file = path / "crds" / "schedulerprofile.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["e2eExtra"] = {"type": "string", "description": "A field the next chart version adds."}
    crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    chart = yaml.safe_load((path / "Chart.yaml").read_text())
    chart["version"] = version
    (path / "Chart.yaml").write_text(yaml.safe_dump(chart, sort_keys=False))
    return path
