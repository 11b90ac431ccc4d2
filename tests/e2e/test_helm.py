"""The Helm chart against the real control plane: install, upgrade, uninstall, and the RBAC proof.

Why these tests exist: users meet kopf-scheduler through ``helm install``, so the chart must install
cleanly (CRDs Established, the peering object there, a StatefulSet whose pods Pod Security "restricted"
admits), upgrade in place and uninstall without leftovers. And its ClusterRole must be *exactly* what the
operator needs: too little and scheduling breaks in a real cluster, too much and the chart over-grants.

No image runs here (kwok nodes run no containers, and nothing schedules the chart's own pods in the local
control plane), so the RBAC proof runs the operator out of cluster as a real process whose only credential
is a token of the chart's ServiceAccount (``kubectl create token``), and drives the core scenario through
it: a chart-created SchedulerProfile turns Ready with its status, a pod is bound with a ``Scheduled`` event
(and one with a ResourceClaim is bound to the node with its device, the claim allocated and reserved; one
asking for a DeviceClass's extended resource gets the claim the scheduler creates, and its pod status says so),
an unschedulable pod gets ``FailedScheduling`` and ``PodScheduled=False``, and deleting the profile clears
the operator's finalizer. Any missing permission shows up as a 403 in the operator's log (kopf logs every
forbidden request) or as a step that never happens; both fail the test. ``kubectl auth can-i --list``
for the account is then compared with an explicit allow-list (tests/unit/test_chart.py:expected_rules).

Each test uses its own release, namespace and peering name; cluster-scoped leftovers (ClusterRole,
ClusterRoleBinding, peering, profiles) are removed even when a test fails. Both tests take ~10-20 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import Cluster, NodeFactory
from tests.e2e.operator_process import (
    PEERING_GROUP,
    PEERING_PLURAL,
    PEERING_VERSION,
    PROFILE_FINALIZER,
    OperatorProcess,
    apply_crds,
    delete_profile,
    get_profile,
    list_profiles,
    pod_condition,
    pod_events,
    pod_manifest,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)
from tests.unit.test_chart import CHART, expected_rules, pinned_binary

#: Rules every authenticated ServiceAccount has (system:basic-user); the chart must add nothing to them
#: but expected_rules().
SELF_REVIEWS = {
    ("authentication.k8s.io", "selfsubjectreviews", "", "create"),
    ("authorization.k8s.io", "selfsubjectaccessreviews", "", "create"),
    ("authorization.k8s.io", "selfsubjectrulesreviews", "", "create"),
}
CHART_CRDS = ("schedulerprofiles.kopf-scheduler.io", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev")
PROFILE_CRD = CHART_CRDS[0]
#: Lines of the operator's log that mean a request was refused for lack of permission.
#: An HTTP 403 or a "forbidden" message; not the milliseconds of a log line's timestamp ("13:43:36,403 INFO ...":
#: a peering line matched by chance once).
FORBIDDEN = re.compile(r"(?<![,.])\b403\b|forbidden", re.IGNORECASE)


@dataclass
class Release:
    """One Helm release of the chart in the test's namespace."""

    name: str
    namespace: str
    kubeconfig: Path
    helm_home: Path

    @property
    def fullname(self) -> str:  # the chart's kopf-scheduler.fullname for a release name without "kopf-scheduler"
        return f"{self.name}-kopf-scheduler"

    @property
    def peering(self) -> str:
        return f"{self.name}-peering"

    def profile(self, suffix: str = "sched") -> str:
        return f"{self.name}-{suffix}"

    def env(self) -> dict[str, str]:
        """The environment of this release's helm and kubectl commands."""
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(self.helm_home / "cache"),
            "HELM_CONFIG_HOME": str(self.helm_home / "config"),
            "HELM_DATA_HOME": str(self.helm_home / "data"),
        }

    def run(self, tool: str, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [pinned_binary(tool), *args], capture_output=True, text=True, env=self.env(), timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{tool} {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("helm", *args, "--namespace", self.namespace, check=check)

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, check=check)

    def values_file(self, values: dict[str, Any]) -> str:
        path = self.helm_home / f"values-{secrets.token_hex(3)}.json"
        path.write_text(json.dumps(values))
        return str(path)

    def install(self, values: dict[str, Any], chart: Path = CHART) -> str:
        """``helm install`` with ``values`` (a JSON values file); returns helm's output (NOTES included)."""
        return self.helm("install", self.name, str(chart), "--values", self.values_file(values)).stdout

    def upgrade_without_hooks(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``helm upgrade --no-hooks``: its pre-upgrade hook is a Job (it applies the CRD), and nothing runs pods in
        the local control plane unless a test plays the kubelet (tests/e2e/test_helm_lifecycle.py runs it)."""
        return self.helm("upgrade", self.name, str(CHART), "--no-hooks", *args)

    def uninstall_without_hooks(self) -> subprocess.CompletedProcess[str]:
        """``helm uninstall --no-hooks``: its pre-delete hook is a Job too (tests/e2e/test_helm_lifecycle.py)."""
        return self.helm("uninstall", self.name, "--ignore-not-found", "--no-hooks", "--wait", "--timeout", "60s",
                         check=False)  # fmt: skip

    def status(self) -> dict[str, Any]:
        return json.loads(self.helm("status", self.name, "--output", "json").stdout)  # type: ignore[no-any-return]


@pytest.fixture
def release(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Release]:
    """A release name unique to the test; whatever the test left installed is removed afterwards."""
    rel = Release(f"ks{secrets.token_hex(3)}", namespace, cluster.kubeconfig, tmp_path / "helm")
    rel.helm_home.mkdir()
    yield rel
    rel.uninstall_without_hooks()
    # A profile may carry the operator's finalizer (no hook ran to remove it).
    delete_profile(cluster.api, rel.profile(), force=True)


def _read(fn: Any, *args: Any) -> Any | None:
    """``fn(*args)``, or None on 404."""
    try:
        return fn(*args)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _established(api: client.ApiClient, name: str) -> bool:
    crd = _read(client.ApiextensionsV1Api(api).read_custom_resource_definition, name)
    conditions = (crd.status.conditions or []) if crd is not None and crd.status else []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def _peering(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    return _read(  # type: ignore[no-any-return]
        client.CustomObjectsApi(api).get_cluster_custom_object, PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL, name
    )


def _release_objects(cluster: Cluster, rel: Release) -> dict[str, Any]:
    """Every object the chart creates (None where missing), by kind."""
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    policy = client.PolicyV1Api(cluster.api)
    return {
        "StatefulSet": _read(cluster.apps.read_namespaced_stateful_set, rel.fullname, rel.namespace),
        "Service": _read(cluster.core.read_namespaced_service, rel.fullname, rel.namespace),
        "ServiceAccount": _read(cluster.core.read_namespaced_service_account, rel.fullname, rel.namespace),
        "PodDisruptionBudget": _read(policy.read_namespaced_pod_disruption_budget, rel.fullname, rel.namespace),
        "ClusterRole": _read(rbac.read_cluster_role, rel.fullname),
        "ClusterRoleBinding": _read(rbac.read_cluster_role_binding, rel.fullname),
        "ClusterKopfPeering": _peering(cluster.api, rel.peering),
    }


def _chart_pods(cluster: Cluster, rel: Release) -> list[Any]:
    selector = f"app.kubernetes.io/instance={rel.name},app.kubernetes.io/name=kopf-scheduler"
    return list(cluster.core.list_namespaced_pod(rel.namespace, label_selector=selector).items)


# ---- install, upgrade, uninstall ----------------------------------------------------------------------------


def test_install_upgrade_uninstall(cluster: Cluster, namespace: str, release: Release) -> None:
    # The chart's pods must pass Pod Security "restricted" admission, or the StatefulSet creates none.
    cluster.core.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    profile = release.profile()
    output = release.install({"peering": {"name": release.peering, "priorityBase": 100, "lifetime": 15},
                              "profiles": [{"name": profile, "spec": {"percentageOfNodesToScore": 50}}]})  # fmt: skip

    # NOTES: the three next steps.
    notes = output[output.index("NOTES:") :]
    assert "kind: SchedulerProfile" in notes
    assert "\nkubectl apply -f - <<'YAML'\n" in notes  # heredocs at column 0, so the blocks paste as they are
    assert notes.count("\nYAML\n") == 2
    assert "schedulerName: my-scheduler" in notes
    assert "kubectl get events --field-selector reason=Scheduled" in notes
    assert f"ClusterKopfPeering {release.peering}" in notes

    for crd in CHART_CRDS:
        wait_for(lambda crd=crd: _established(cluster.api, crd), timeout=30, message=f"CRD {crd} not Established")
    objects = _release_objects(cluster, release)
    assert all(objects.values()), {kind: obj is not None for kind, obj in objects.items()}
    statefulset = objects["StatefulSet"]
    assert statefulset.spec.replicas == 2
    assert objects["Service"].spec.cluster_ip == "None"
    assert objects["ClusterRoleBinding"].subjects[0].namespace == namespace
    created = get_profile(cluster.api, profile)
    assert created["spec"] == {"percentageOfNodesToScore": 50}
    assert "helm.sh/resource-policy" not in (created["metadata"].get("annotations") or {})  # keepProfiles: false

    # Both replicas' pods exist (Parallel pod management): admission let them in. Nothing runs them here.
    pods = wait_for(
        lambda: len(_chart_pods(cluster, release)) == 2 and _chart_pods(cluster, release),
        timeout=60,
        message=lambda: f"StatefulSet pods not created; events: {_namespace_event_notes(cluster, namespace)}",
    )
    assert sorted(p.metadata.name for p in pods) == [f"{release.fullname}-0", f"{release.fullname}-1"]
    for pod in pods:
        env = {e.name: e for e in pod.spec.containers[0].env}
        assert env["POD_ID"].value_from.field_ref.field_path == "metadata.name"
        assert pod.spec.service_account_name == release.fullname

    # Upgrade: a changed value reaches the StatefulSet, as revision 2.
    generation = statefulset.metadata.generation
    release.upgrade_without_hooks("--reuse-values", "--set", "logLevel=debug")
    status = release.status()
    assert (status["version"], status["info"]["status"]) == (2, "deployed")
    upgraded = cluster.apps.read_namespaced_stateful_set(release.fullname, namespace)
    assert upgraded.metadata.generation > generation
    assert "--log-level=debug" in upgraded.spec.template.spec.containers[0].args
    assert all(_release_objects(cluster, release).values())

    # Uninstall: everything goes but the CRDs (Helm never deletes crds/). No operator ever ran, so no finalizer: the
    # hook that removes it is skipped here (tests/e2e/test_helm_lifecycle.py runs it); the chart's profile goes.
    assert release.uninstall_without_hooks().returncode == 0
    leftovers = {kind: obj is not None for kind, obj in _release_objects(cluster, release).items()}
    assert not any(leftovers.values()), leftovers
    wait_for(lambda: not _chart_pods(cluster, release), timeout=60, message="StatefulSet pods not deleted")
    assert release.helm("status", release.name, check=False).returncode != 0
    assert all(_established(cluster.api, crd) for crd in CHART_CRDS)
    wait_for(lambda: not list_profiles_named(cluster, profile), timeout=30, message=f"profile {profile} not deleted")


def list_profiles_named(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return [p for p in list_profiles(cluster.api) if p["metadata"]["name"] == name]


def _namespace_event_notes(cluster: Cluster, namespace: str) -> list[str]:
    return [f"{e.reason}: {e.message}" for e in cluster.core.list_namespaced_event(namespace).items]


# ---- RBAC proof ---------------------------------------------------------------------------------------------


def token_kubeconfig(admin_kubeconfig: Path, token: str, path: Path) -> Path:
    """A kubeconfig with the admin kubeconfig's cluster (server, CA) and ``token`` as the only credential."""
    config = yaml.safe_load(admin_kubeconfig.read_text())
    context_name = config["current-context"]
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    for key in ("certificate-authority",):  # relative paths are relative to the kubeconfig's directory
        if key in cluster and not Path(cluster[key]).is_absolute():
            cluster[key] = str((admin_kubeconfig.parent / cluster[key]).resolve())
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "cluster", "cluster": cluster}],
                "users": [{"name": "chart-sa", "user": {"token": token}}],
                "contexts": [{"name": "chart-sa", "context": {"cluster": "cluster", "user": "chart-sa"}}],
                "current-context": "chart-sa",
            }
        )
    )
    path.chmod(0o600)
    return path


Grant = tuple[str, str, str, str]  # (apiGroup, resource[/subresource], resourceName or "", verb)


def parse_can_i_list(text: str) -> tuple[set[Grant], set[tuple[str, str]]]:
    """``kubectl auth can-i --list`` → (resource grants, non-resource (url, verb) grants).

    The table's columns are "Resources", "Non-Resource URLs", "Resource Names", "Verbs"; a resource is
    printed as ``plural.group/subresource`` (no group for the core API).
    """
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0]
    starts = [header.index(col) for col in ("Resources", "Non-Resource URLs", "Resource Names", "Verbs")]
    bounds = [*starts[1:], None]
    resources: set[Grant] = set()
    urls: set[tuple[str, str]] = set()

    def listed(cell: str) -> list[str]:
        return cell.strip().strip("[]").split()

    for line in lines[1:]:
        cells = [line[start:end].strip() for start, end in zip(starts, bounds, strict=True)]
        resource, url_cell, names_cell, verbs_cell = cells
        verbs = listed(verbs_cell)
        if resource:
            plural_group, _, sub = resource.partition("/")
            plural, _, group = plural_group.partition(".")
            full = f"{plural}/{sub}" if sub else plural
            for name in listed(names_cell) or [""]:
                resources.update((group, full, name, verb) for verb in verbs)
        for url in listed(url_cell):
            urls.update((url, verb) for verb in verbs)
    return resources, urls


def test_operator_runs_with_only_the_chart_service_account(
    cluster: Cluster, namespace: str, release: Release, kwok_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = release.profile()
    release.install({"peering": {"name": release.peering, "priorityBase": 100, "lifetime": 15},
                     "profiles": [{"name": profile}]})  # fmt: skip
    for crd in CHART_CRDS:
        wait_for(lambda crd=crd: _established(cluster.api, crd), timeout=30, message=f"CRD {crd} not Established")
    nodes = [kwok_nodes(cpu="4", memory="8Gi", pods="20") for _ in range(2)]

    # The only credential: a TokenRequest token of the chart's ServiceAccount.
    token = release.kubectl(
        "create", "token", release.fullname, "--namespace", namespace, "--duration", "1h"
    ).stdout.strip()
    kubeconfig = token_kubeconfig(cluster.kubeconfig, token, tmp_path / "chart-sa.kubeconfig")
    whoami = release.run("kubectl", "--kubeconfig", str(kubeconfig), "auth", "whoami", "-o", "json").stdout
    assert json.loads(whoami)["status"]["userInfo"]["username"] == (
        f"system:serviceaccount:{namespace}:{release.fullname}"
    )

    # create_peering=False: the chart made the peering object; the operator's own create (409) runs too.
    operator = OperatorProcess(
        kubeconfig,
        peering_name=release.peering,
        create_peering=False,
        log_dir=tmp_path,
        name="chart-sa-operator",
        extra_args=["--log-level", "debug"],
    )
    try:
        operator.start(timeout=60)
        # Pods are created only after the operator's start-up re-LIST has been applied: a pod that the watch
        # delivers while that LIST is in flight is dropped as "deleted" by SchedulerApp._apply_lists (an
        # operator race, reported separately; not what this test is about).
        operator.wait_log(r"cache reconciled", timeout=30)
        _core_scenario(cluster, namespace, profile, nodes, operator)
        _device_scenario(cluster, namespace, profile, nodes)
        delete_profile(cluster.api, profile, wait=30)  # the operator (patch on profiles) drops its finalizer
    except BaseException:
        print(_diagnosis(cluster, release, operator))
        raise
    finally:
        operator.stop()
    forbidden = operator.log_lines(FORBIDDEN)
    assert not forbidden, "the operator was refused something:\n" + "\n".join(forbidden[:20])

    # The account may do exactly the allow-list, plus what every authenticated account may.
    granted, urls = parse_can_i_list(
        release.kubectl("auth", "can-i", "--list", f"--as=system:serviceaccount:{namespace}:{release.fullname}").stdout
    )
    assert granted - SELF_REVIEWS == expected_rules(release.peering), {
        "missing": sorted(expected_rules(release.peering) - granted),
        "extra": sorted(granted - SELF_REVIEWS - expected_rules(release.peering)),
    }
    # Non-resource URLs: none from the chart; the same as an account without any binding in the namespace.
    _, baseline_urls = parse_can_i_list(
        release.kubectl("auth", "can-i", "--list", f"--as=system:serviceaccount:{namespace}:default").stdout
    )
    assert urls == baseline_urls
    assert {verb for _, verb in urls} == {"get"}
    # The token itself sees the same rules (no impersonation involved).
    own, _ = parse_can_i_list(release.run("kubectl", "--kubeconfig", str(kubeconfig), "auth", "can-i", "--list").stdout)
    assert own == granted


def _diagnosis(cluster: Cluster, rel: Release, operator: OperatorProcess) -> str:
    """What a failing RBAC-proof run needs for a post-mortem: the operator's view and the objects' state."""
    parts = [operator.log_tail(120)]
    with contextlib.suppress(Exception):
        parts.append(f"healthz: {operator.healthz()}")
    with contextlib.suppress(Exception):
        parts.append(f"peering {rel.peering}: {_peering(cluster.api, rel.peering)}")
    with contextlib.suppress(Exception):
        parts.append(f"profile: {get_profile(cluster.api, rel.profile()).get('status')}")
    with contextlib.suppress(Exception):
        metrics = [line for line in operator.metrics_text().splitlines() if line.startswith("scheduler_")]
        parts.append("metrics:\n" + "\n".join(metrics[:40]))
    with contextlib.suppress(Exception):
        for pod in cluster.core.list_namespaced_pod(rel.namespace).items:
            parts.append(f"pod {pod.metadata.name}: node={pod.spec.node_name} scheduler={pod.spec.scheduler_name}")
    return "\n".join(parts)


def _device_scenario(cluster: Cluster, namespace: str, profile: str, nodes: list[str]) -> None:
    """DynamicResources' calls with the chart's rights: the claim is read, allocated and reserved (a normal update
    for the finalizer, then the status update) and the pod bound to the node with the device; a pod asking for a
    DeviceClass's extended resource gets a claim the scheduler creates, and its pods/status patch."""
    objects = client.CustomObjectsApi(cluster.api)
    driver = f"gpu-{secrets.token_hex(3)}.example.com"
    device_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": driver},
                    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}  # fmt: skip
    slice_ = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{nodes[1]}-{driver}"},
        "spec": {"driver": driver, "nodeName": nodes[1], "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
                 "pool": {"name": nodes[1], "generation": 1, "resourceSliceCount": 1}},
    }  # fmt: skip
    request = {"name": "gpu", "exactly": {"deviceClassName": driver}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "gpu"},
             "spec": {"devices": {"requests": [request]}}}  # fmt: skip
    extended = f"{driver}/gpu"
    backing = {**device_class, "metadata": {"name": f"{driver}-ext"},
               "spec": {**device_class["spec"], "extendedResourceName": extended}}  # fmt: skip
    objects.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", device_class)
    objects.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", backing)
    objects.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", slice_)
    objects.create_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims", claim)
    try:
        pod = pod_manifest("with-device", profile, cpu="100m", memory="64Mi")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu"}]
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        cluster.core.create_namespaced_pod(namespace, pod)
        assert wait_pods_bound(cluster.core, namespace, ["with-device"], timeout=30) == {"with-device": nodes[1]}
        allocated = objects.get_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims", "gpu")
        [result] = allocated["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (driver, nodes[1], "gpu-0")
        assert [ref["name"] for ref in allocated["status"]["reservedFor"]] == ["with-device"]
        # DRAExtendedResource: create resourceclaims, then patch pods/status.
        pod = pod_manifest("with-extended", profile, cpu="100m", memory="64Mi")
        pod["spec"]["containers"][0]["resources"] = {"requests": {extended: "1"}, "limits": {extended: "1"}}
        cluster.core.create_namespaced_pod(namespace, pod)
        assert wait_pods_bound(cluster.core, namespace, ["with-extended"], timeout=30) == {"with-extended": nodes[1]}
        status = cluster.core.read_namespaced_pod("with-extended", namespace).status.extended_resource_claim_status
        assert status is not None
        created = objects.get_namespaced_custom_object(
            "resource.k8s.io", "v1", namespace, "resourceclaims", status.resource_claim_name
        )
        [result] = created["status"]["allocation"]["devices"]["results"]
        assert (result["pool"], result["device"]) == (nodes[1], "gpu-1")
        assert [ref["name"] for ref in created["status"]["reservedFor"]] == ["with-extended"]
    finally:
        unhold = {"metadata": {"finalizers": None}}
        claims = objects.list_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims")["items"]
        for claim in claims:
            with contextlib.suppress(ApiException):
                objects.patch_namespaced_custom_object(
                    "resource.k8s.io", "v1", namespace, "resourceclaims", claim["metadata"]["name"], unhold
                )
        for plural, name in (
            ("resourceslices", slice_["metadata"]["name"]),
            ("deviceclasses", driver),
            ("deviceclasses", backing["metadata"]["name"]),
        ):
            with contextlib.suppress(ApiException):
                objects.delete_cluster_custom_object("resource.k8s.io", "v1", plural, name)


def _core_scenario(cluster: Cluster, namespace: str, profile: str, nodes: list[str], operator: OperatorProcess) -> None:
    """Profile Ready with status, a pod bound with its Scheduled event, an unschedulable pod reported."""
    status = wait_profile_status(cluster.api, profile, ready=True, timeout=30)["status"]
    assert status["observedGeneration"] == 1
    assert {"name": "NodeResourcesFit"} in status["effectivePlugins"]["filter"]
    assert status["scorePlugins"]
    assert PROFILE_FINALIZER in get_profile(cluster.api, profile)["metadata"]["finalizers"]

    cluster.core.create_namespaced_pod(namespace, pod_manifest("fits", profile, cpu="500m", memory="256Mi"))
    cluster.core.create_namespaced_pod(namespace, pod_manifest("too-big", profile, cpu="64"))

    bound = wait_pods_bound(cluster.core, namespace, ["fits"], timeout=30)
    assert bound["fits"] in nodes
    scheduled = wait_for(
        lambda: pod_events(cluster.api, namespace, "fits", reason="Scheduled"),
        timeout=30,
        message="no Scheduled event for fits",
    )
    assert scheduled[0].note == f"Successfully assigned {namespace}/fits to {bound['fits']}"
    assert scheduled[0].reporting_controller == profile
    assert scheduled[0].type == "Normal"

    failed = wait_for(
        lambda: pod_events(cluster.api, namespace, "too-big", reason="FailedScheduling"),
        timeout=30,
        message="no FailedScheduling event for too-big",
    )
    assert failed[0].type == "Warning"
    assert re.fullmatch(r"0/\d+ nodes are available: .*\d+ Insufficient cpu\..*", failed[0].note), failed[0].note

    def unschedulable() -> Any:
        pod = cluster.core.read_namespaced_pod("too-big", namespace)
        condition = pod_condition(pod)
        return condition if condition is not None and condition.status == "False" else None

    condition = wait_for(unschedulable, timeout=30, message="too-big has no PodScheduled=False")
    assert condition.reason == "Unschedulable"
    assert condition.message == failed[0].note
    assert cluster.core.read_namespaced_pod("too-big", namespace).spec.node_name is None
    with contextlib.suppress(ApiException):
        cluster.core.delete_namespaced_pod("too-big", namespace, grace_period_seconds=0)
    assert operator.alive()


# ---- scheduler-plugins' PodGroup CRD (coscheduling.installCRD) ------------------------------------------------


def test_the_podgroup_crd_another_installation_owns_is_left_alone(cluster: Cluster, release: Release) -> None:
    """With ``coscheduling.installCRD`` the chart installs the PodGroup CRD only where the cluster has none (or its
    own release installed it): one applied by someone else (here with kubectl, as scheduler-plugins' manifests
    do) is neither replaced nor adopted, and the install succeeds (Helm would refuse to take over an object it
    does not own)."""
    apply_crds(cluster.api, CHART / "files" / "coscheduling")
    name = "podgroups.scheduling.x-k8s.io"
    release.install({"peering": {"name": release.peering}, "coscheduling": {"installCRD": True}})
    manifest = release.helm("get", "manifest", release.name).stdout
    assert name not in manifest
    crd = client.ApiextensionsV1Api(cluster.api).read_custom_resource_definition(name)
    assert "meta.helm.sh/release-name" not in (crd.metadata.annotations or {})
    assert _established(cluster.api, name)


def test_the_podgroup_crd_is_installed_where_absent_and_kept(cluster: Cluster, release: Release) -> None:
    """Where the cluster has no PodGroup CRD, ``coscheduling.installCRD`` installs it as part of the release: an
    upgrade keeps managing it (the release owns it now), and uninstall leaves it (every PodGroup lives in it)."""
    ext = client.ApiextensionsV1Api(cluster.api)
    name = "podgroups.scheduling.x-k8s.io"
    with contextlib.suppress(ApiException):
        ext.delete_custom_resource_definition(name)
    wait_for(lambda: _read(ext.read_custom_resource_definition, name) is None, timeout=60, message=f"{name} stays")
    try:
        release.install({"peering": {"name": release.peering}, "coscheduling": {"installCRD": True}})
        assert f"name: {name}" in release.helm("get", "manifest", release.name).stdout
        wait_for(lambda: _established(cluster.api, name), timeout=30, message=f"{name} not Established")
        crd = ext.read_custom_resource_definition(name)
        assert crd.metadata.annotations["meta.helm.sh/release-name"] == release.name
        assert crd.metadata.annotations["helm.sh/resource-policy"] == "keep"
        assert crd.spec.versions[0].name == "v1alpha1"

        release.upgrade_without_hooks("--reuse-values", "--set", "logLevel=debug")
        assert f"name: {name}" in release.helm("get", "manifest", release.name).stdout
        assert ext.read_custom_resource_definition(name).metadata.uid == crd.metadata.uid

        assert release.uninstall_without_hooks().returncode == 0
        kept = ext.read_custom_resource_definition(name)
        assert (kept.metadata.uid, kept.metadata.deletion_timestamp) == (crd.metadata.uid, None)
    finally:  # as the other tests expect it (applied from the same file)
        apply_crds(cluster.api, CHART / "files" / "coscheduling")
