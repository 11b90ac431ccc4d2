"""The Helm chart, checked offline: ``helm lint``, and ``helm template`` output validated against the JSON
schemas of the Kubernetes release the project pins, plus the properties the chart promises.

Why offline: these run in the unit layer (no API server), so a broken template, a field the pinned
Kubernetes does not know, an RBAC rule too many or a securityContext below Pod Security "restricted" fails
in seconds. ``tests/e2e/test_helm.py`` then installs the chart into the real control plane and runs the
operator with nothing but the chart's ServiceAccount token.

Schemas: the ``kubernetes-validate`` package bundles JSON schemas per Kubernetes minor (1.37.0 bundles
v1.5 … v1.37). We validate against **v1.36** (``v1.36.0-local-strict``: additional properties rejected),
the minor of ``KUBE_VERSION`` (1.36.3) in tools/versions.env; the test fails if that schema set is absent
rather than silently using another one. Kinds it has no schema for (our CRDs' objects, the Prometheus
Operator's ServiceMonitor) are checked by hand below: SchedulerProfiles through the operator's own
pydantic model, which the CRD is generated from.

helm comes from the pinned binary directory (``make binaries``); a missing helm fails these tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kopf_scheduler._version import __version__
from kopf_scheduler.api.profile import SchedulerProfileSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "kopf-scheduler"


def _pinned_kube_version() -> str:
    for line in (REPO_ROOT / "tools" / "versions.env").read_text().splitlines():
        if line.startswith("KUBE_VERSION="):
            return line.split("=", 1)[1].strip()
    raise AssertionError("KUBE_VERSION missing from tools/versions.env")


KUBE_VERSION = _pinned_kube_version()  # 1.36.3
SCHEMA_MINOR = ".".join(KUBE_VERSION.split(".")[:2])  # 1.36

#: The ClusterRole's rules, exactly: (apiGroup, resource, resourceName or "", verb). The e2e test compares
#: `kubectl auth can-i --list` for the chart's ServiceAccount with the same set. Every entry is a call the
#: operator or kopf makes (see templates/rbac.yaml for which); `get` on pods, profiles and the peering object
#: and events `patch` are the issue's list (read access `list` already grants; event series updates); `get`
#: on the storage kinds and update/patch on PVs and PVCs follow upstream's kube-scheduler and volume-scheduler
#: roles (the latter for VolumeBinding's PreBind).
PEERING = "kopf-scheduler"


def expected_rules(peering_name: str = PEERING) -> set[tuple[str, str, str, str]]:
    rules: set[tuple[str, str, str, str]] = set()

    def allow(group: str, resources: Iterable[str], verbs: Iterable[str], name: str = "") -> None:
        rules.update((group, r, name, v) for r in resources for v in verbs)

    # delete: DefaultPreemption's victims; patch: spec.explain.annotations on a failed attempt
    allow("", ["pods"], ["get", "list", "watch", "delete", "patch"])
    allow("", ["pods/binding"], ["create"])
    allow("", ["pods/status"], ["patch"])
    allow("events.k8s.io", ["events"], ["create", "patch"])
    allow("", ["nodes", "namespaces", "services", "replicationcontrollers"], ["list", "watch"])
    allow("apps", ["replicasets", "statefulsets"], ["list", "watch"])
    # The volume plugins' objects; update/patch of PVs and PVCs for VolumeBinding's PreBind (upstream's
    # system:volume-scheduler), get on all six as upstream's system:kube-scheduler.
    allow("", ["persistentvolumes", "persistentvolumeclaims"], ["get", "list", "watch", "update", "patch"])
    allow(
        "storage.k8s.io",
        ["storageclasses", "csinodes", "csidrivers", "csistoragecapacities", "volumeattachments"],
        ["get", "list", "watch"],
    )
    allow("policy", ["poddisruptionbudgets"], ["get", "list", "watch"])  # DefaultPreemption's PDB accounting
    # DynamicResources (upstream's system:kube-scheduler DRA rules; the claim status write).
    allow("resource.k8s.io", ["deviceclasses", "resourceslices", "resourceclaimtemplates"], ["get", "list", "watch"])
    # create/delete: DRA-backed extended resources' claim (upstream's DRAExtendedResource rule).
    allow("resource.k8s.io", ["resourceclaims"], ["get", "list", "watch", "update", "patch", "create", "delete"])
    allow("resource.k8s.io", ["resourceclaims/status"], ["get", "update", "patch"])
    allow("resource.k8s.io", ["resourceclaims/binding"], ["update", "patch"])  # 1.36 granular status authz
    # Workload-aware scheduling's API (optional: watched where served); PodGroups as system:kube-scheduler.
    allow("scheduling.k8s.io", ["workloads"], ["list", "watch"])
    allow("scheduling.k8s.io", ["podgroups"], ["get", "list", "watch"])
    allow("scheduling.k8s.io", ["podgroups/status"], ["patch"])  # the pod-group cycle's PodGroupScheduled
    # scheduler-plugins' Coscheduling PodGroups (optional CRD): watched, and their status kept.
    allow("scheduling.x-k8s.io", ["podgroups"], ["list", "watch"])
    allow("scheduling.x-k8s.io", ["podgroups/status"], ["patch"])
    allow("kopf-scheduler.io", ["schedulerprofiles"], ["get", "list", "watch", "patch"])
    allow("kopf-scheduler.io", ["schedulerprofiles/status"], ["patch"])
    allow("apiextensions.k8s.io", ["customresourcedefinitions"], ["list", "watch"])
    allow("kopf.dev", ["clusterkopfpeerings"], ["list", "watch", "create"])
    allow("kopf.dev", ["clusterkopfpeerings"], ["get", "patch"], name=peering_name)
    # Secure serving of the metrics port: delegated authentication and authorization (web/delegated.py).
    allow("authentication.k8s.io", ["tokenreviews"], ["create"])
    allow("authorization.k8s.io", ["subjectaccessreviews"], ["create"])
    return rules


#: Values that switch every optional part on, for the "everything renders and validates" cases.
FULL_VALUES: dict[str, Any] = {
    "replicas": 3,
    "namespaces": ["team-a", "team-b"],
    "extraArgs": ["--pod-max-backoff-seconds", "20"],
    "extraEnv": [{"name": "EXTRA", "value": "1"}],
    "imagePullSecrets": [{"name": "registry"}],
    "metrics": {
        "port": 10259,
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}, "jobLabel": "kube-scheduler"},
        "tls": {"secretName": "kopf-scheduler-tls"},
        "reader": {"subjects": [{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}]},
        "dashboard": {"enabled": True},
        "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
    },
    "podAntiAffinity": "hard",
    "coscheduling": {"installCRD": True},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "scheduler", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "kopf-scheduler"}},
        }
    ],
    "priorityClassName": "scheduler-critical",
    "networkPolicy": {"enabled": True, "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]},
    "podAnnotations": {"a": "b"},
    "podLabels": {"team": "platform"},
    "serviceAccount": {"annotations": {"example.com/owner": "platform"}},
    "profiles": [
        {"name": "defaults"},
        {"name": "empty-spec", "spec": {}},
        {
            "name": "bin-packing",
            "spec": {
                "plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}},
                "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}],
            },
        },
    ],
}


# ---- helpers ---------------------------------------------------------------------------------------------


def pinned_binary(name: str) -> str:
    """A binary of the pinned release (``make binaries`` puts kubectl, helm, … there), else from PATH."""
    bin_dir = os.environ.get("KOPF_SCHEDULER_BIN_DIR") or str(
        Path(os.environ.get("KOPF_SCHEDULER_CACHE", Path.home() / ".cache" / "kopf-scheduler")) / KUBE_VERSION / "bin"
    )
    candidate = Path(bin_dir) / name
    found = str(candidate) if candidate.exists() else shutil.which(name)
    assert found, f"{name} not found in {bin_dir} or on PATH: run `make binaries`"
    return found


def helm_binary() -> str:
    return pinned_binary("helm")


def helm(*args: str, check: bool = True, tmp_home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": os.devnull}
    if tmp_home is not None:  # keep helm's cache/config out of the user's home
        env.update(
            HELM_CACHE_HOME=str(tmp_home / "cache"),
            HELM_CONFIG_HOME=str(tmp_home / "config"),
            HELM_DATA_HOME=str(tmp_home / "data"),
        )
    result = subprocess.run([helm_binary(), *args], capture_output=True, text=True, env=env, timeout=60, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def render(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = "ks",
    namespace: str = "kube-system",
    include_crds: bool = False,
    include_tests: bool = False,
    include_hooks: bool = False,
    check: bool = True,
) -> list[dict[str, Any]] | subprocess.CompletedProcess[str]:
    """``helm template`` of the chart with ``values`` (as a JSON values file); the parsed documents.

    The `helm test` hook's objects (templates/tests/) only with ``include_tests``: ``helm install`` does not
    create them (tests/unit/test_chart_test_hook.py checks them). The pre-delete hook's objects (created by
    ``helm uninstall`` only) only with ``include_hooks`` (tests/unit/test_chart_pre_delete.py checks them).
    """
    args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    if include_crds:
        args.append("--include-crds")
    if not include_tests:
        args.append("--skip-tests")
    with tempfile.TemporaryDirectory(prefix="chart-values-") as tmp:
        if values:
            values_file = Path(tmp) / "values.json"  # JSON is YAML: types survive exactly
            values_file.write_text(json.dumps(values))
            args += ["--values", str(values_file)]
        result = helm(*args, check=check)
    if not check:
        return result
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    if include_hooks:
        return docs
    return [doc for doc in docs if doc["metadata"].get("annotations", {}).get("helm.sh/hook", "test") == "test"]


def docs_of(values: Mapping[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    docs = render(values, **kwargs)
    assert isinstance(docs, list)
    return docs


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def headless(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The StatefulSet's headless Service (not the explain APIService's)."""
    found = [d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"]
    assert len(found) == 1, f"expected one headless Service, got {len(found)}"
    return found[0]


def container_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1
    return pod["containers"][0]


def operator_role(docs: list[dict[str, Any]], kind: str = "ClusterRole") -> dict[str, Any]:
    """The operator's own ClusterRole (or its binding): not the metrics-reader one, the explain API's, nor a hook's."""
    others = ("-metrics-reader", "-explain-viewer", "-auth-delegator")
    found = [
        d
        for d in docs
        if d["kind"] == kind
        and not d["metadata"]["name"].endswith(others)
        and "helm.sh/hook" not in d["metadata"].get("annotations", {})
    ]
    assert len(found) == 1, f"expected one operator {kind}, got {len(found)}"
    return found[0]


def rules_of(cluster_role: Mapping[str, Any]) -> set[tuple[str, str, str, str]]:
    flat: set[tuple[str, str, str, str]] = set()
    for rule in cluster_role["rules"]:
        names = rule.get("resourceNames") or [""]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in names:
                        flat.add((group, resource, name, verb))
    return flat


# ---- lint and schema validation ----------------------------------------------------------------------------


def test_helm_lint_strict(tmp_path: Path) -> None:
    result = helm("lint", "--strict", str(CHART), tmp_home=tmp_path)
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    values = tmp_path / "full.json"
    values.write_text(json.dumps(FULL_VALUES))
    helm("lint", "--strict", str(CHART), "--values", str(values), tmp_home=tmp_path)


def test_the_pinned_minor_has_bundled_schemas() -> None:
    """kubernetes-validate must bundle exactly our minor; it would otherwise fall back to an older one."""
    assert KUBE_VERSION.startswith("1.36.")
    assert f"{SCHEMA_MINOR}.0" in kubernetes_validate.utils.all_versions()


@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["defaults", "everything-on"])
def test_rendered_manifests_validate_against_the_pinned_kubernetes_schemas(values: dict[str, Any] | None) -> None:
    docs = docs_of(values, include_crds=True, include_hooks=True)
    kinds = sorted(d["kind"] for d in docs)
    builtin = {
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "Service",
        "StatefulSet",
        "PodDisruptionBudget",
        "APIService",
        "Job",  # the pre-delete hook's
    }
    optional = {"NetworkPolicy", "ConfigMap", "RoleBinding", "Secret"}
    custom = {"ClusterKopfPeering", "SchedulerProfile", "ServiceMonitor", "PrometheusRule"}
    assert set(kinds) <= builtin | optional | custom, kinds
    assert builtin <= set(kinds)
    if values is FULL_VALUES:
        assert optional | custom <= set(kinds)
    # schedulerprofiles, clusterkopfpeerings, kopfpeerings; and with coscheduling.installCRD the PodGroups'
    assert kinds.count("CustomResourceDefinition") == (4 if values is FULL_VALUES else 3)
    for doc in docs:
        if doc["kind"] in custom:
            continue
        used = kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        assert used == SCHEMA_MINOR, f"{doc['kind']} validated against {used}, not {SCHEMA_MINOR}"


def test_an_invalid_field_is_caught_by_the_schemas() -> None:
    """The validation above can fail: a misspelt field in a StatefulSet is rejected in strict mode."""
    statefulset = one(docs_of(), "StatefulSet")
    statefulset["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, KUBE_VERSION, strict=True)


def test_custom_objects_are_well_formed() -> None:
    docs = docs_of(FULL_VALUES)
    peering = one(docs, "ClusterKopfPeering")
    assert peering["apiVersion"] == "kopf.dev/v1"
    assert set(peering) == {"apiVersion", "kind", "metadata"}
    profiles = [d for d in docs if d["kind"] == "SchedulerProfile"]
    assert [p["metadata"]["name"] for p in profiles] == ["defaults", "empty-spec", "bin-packing"]
    for profile in profiles:
        assert profile["apiVersion"] == "kopf-scheduler.io/v1alpha1"
        assert "namespace" not in profile["metadata"]  # cluster-scoped
        SchedulerProfileSpec.model_validate(profile["spec"])  # what the operator will accept
    assert profiles[0]["spec"] == {}
    assert profiles[1]["spec"] == {}
    assert profiles[2]["spec"] == FULL_VALUES["profiles"][2]["spec"]
    monitor = one(docs, "ServiceMonitor")
    service = headless(docs)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["kube-system"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]


# ---- CRDs and versions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["schedulerprofile.yaml", "kopf-peering.yaml"])
def test_chart_crds_are_the_top_level_crds(name: str) -> None:
    """The chart ships copies (Helm reads only the chart directory); `make crds` refreshes both."""
    assert (CHART / "crds" / name).read_bytes() == (REPO_ROOT / "crds" / name).read_bytes(), (
        f"charts/kopf-scheduler/crds/{name} differs from crds/{name}: run `make crds`"
    )
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == ["kopf-peering.yaml", "schedulerprofile.yaml"]


def test_rendered_crds_are_the_files() -> None:
    rendered = {d["metadata"]["name"]: d for d in docs_of(include_crds=True) if d["kind"] == "CustomResourceDefinition"}
    files = {
        d["metadata"]["name"]: d
        for path in sorted((REPO_ROOT / "crds").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d
    }
    assert rendered == files


def _hooks(values: Mapping[str, Any] | None, event: str) -> list[dict[str, Any]]:
    docs = docs_of(values, include_hooks=True)
    return [d for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == event]


def test_upgrades_apply_the_chart_crd_first_from_a_pre_upgrade_job() -> None:
    """Helm never upgrades crds/: a pre-upgrade hook Job server-side applies the SchedulerProfile CRD, exactly the
    file, before Helm updates anything else (pre-upgrade hooks run first); it may touch that CRD and nothing else."""
    docs = _hooks(None, "pre-upgrade")
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    by_kind = {d["kind"]: d for d in docs}
    for doc in docs:
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        assert int(annotations["helm.sh/hook-weight"]) == (0 if doc["kind"] == "Job" else -1)
        assert kubernetes_validate.validate(doc, KUBE_VERSION, strict=True) == SCHEMA_MINOR
    assert rules_of(by_kind["ClusterRole"]) == {
        ("apiextensions.k8s.io", "customresourcedefinitions", "schedulerprofiles.kopf-scheduler.io", verb)
        for verb in ("get", "patch")
    }
    pod = by_kind["Job"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == by_kind["ServiceAccount"]["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["command"] == ["python3", "-c", (CHART / "files" / "hooks.py").read_text()]
    assert container["args"][:2] == ["apply-crds", "--timeout=60"]
    (crd,) = [json.loads(a.split("=", 1)[1]) for a in container["args"] if a.startswith("--crd-json=")]
    assert crd == yaml.safe_load((CHART / "crds" / "schedulerprofile.yaml").read_text())
    statefulset_pod = one(docs_of(), "StatefulSet")["spec"]["template"]["spec"]
    assert pod["securityContext"] == statefulset_pod["securityContext"]
    assert container["securityContext"] == statefulset_pod["containers"][0]["securityContext"]
    assert not _hooks({"crds": {"enabled": False}}, "pre-upgrade")  # CRDs managed apart
    # `helm upgrade --reuse-values` from a release made before `crds` existed: its values have none, and the
    # defaults hold (null deletes the key, as the old release's values lack it).
    assert [d["kind"] for d in _hooks({"crds": None}, "pre-upgrade")].count("Job") == 1


def test_crds_keep_false_has_the_pre_delete_hook_delete_the_crd() -> None:
    def deletes(values: Mapping[str, Any] | None) -> bool:
        job = next(d for d in _hooks(values, "pre-delete") if d["kind"] == "Job")
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        role = next(d for d in _hooks(values, "pre-delete") if d["kind"] == "ClusterRole")
        granted = ("apiextensions.k8s.io", "customresourcedefinitions", "schedulerprofiles.kopf-scheduler.io", "delete")
        assert ("--delete-crd=schedulerprofiles.kopf-scheduler.io" in args) == (granted in rules_of(role))
        return granted in rules_of(role)

    assert not deletes(None)  # kept by default, as Helm keeps crds/
    assert deletes({"crds": {"keep": False}})
    assert not deletes({"crds": {"keep": False, "enabled": False}})  # never a CRD the chart does not manage


def test_app_version_is_the_package_version_and_the_default_image_tag() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert container_of(docs_of())["image"] == f"ghcr.io/kopf-scheduler/kopf-scheduler:{__version__}"
    image = container_of(docs_of({"image": {"repository": "registry.example/ks", "tag": "dev"}}))["image"]
    assert image == "registry.example/ks:dev"


# ---- RBAC --------------------------------------------------------------------------------------------------


def test_cluster_role_is_exactly_what_the_operator_uses() -> None:
    docs = docs_of()
    role = operator_role(docs)
    assert rules_of(role) == expected_rules()
    binding = operator_role(docs, "ClusterRoleBinding")
    account = one(docs, "ServiceAccount")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "kube-system"}
    ]
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]


def test_peering_name_is_used_consistently() -> None:
    docs = docs_of({"peering": {"name": "sched-a", "priorityBase": 100, "lifetime": 20}})
    assert one(docs, "ClusterKopfPeering")["metadata"]["name"] == "sched-a"
    args = container_of(docs)["args"]
    assert "--peering-name=sched-a" in args
    assert "--peering-lifetime=20" in args
    assert rules_of(operator_role(docs)) == expected_rules("sched-a")


def test_two_releases_do_not_share_cluster_scoped_names() -> None:
    a, b = docs_of(release="one"), docs_of(release="two")
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        assert operator_role(a, kind)["metadata"]["name"] != operator_role(b, kind)["metadata"]["name"]
    reader = {d["metadata"]["name"] for d in a if d["kind"] == "ClusterRole"}
    assert reader.isdisjoint(d["metadata"]["name"] for d in b if d["kind"] == "ClusterRole")


# ---- the StatefulSet -----------------------------------------------------------------------------------------


def test_security_context_meets_pod_security_restricted() -> None:
    """The fields Pod Security "restricted" checks (pod-security-admission's restricted profile)."""
    pod = one(docs_of(FULL_VALUES), "StatefulSet")["spec"]["template"]["spec"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert psc["runAsUser"] != 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"] + pod.get("initContainers", []):
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["runAsNonRoot"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not sc.get("privileged")
    assert all("hostPath" not in v for v in pod.get("volumes", []))
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    # The read-only root filesystem needs a writable /tmp.
    assert {"name": "tmp", "mountPath": "/tmp"} in pod["containers"][0]["volumeMounts"]


def test_statefulset_shape() -> None:
    docs = docs_of()
    sts = one(docs, "StatefulSet")
    spec = sts["spec"]
    assert spec["replicas"] == 2
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == headless(docs)["metadata"]["name"]
    template = spec["template"]
    assert spec["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    container = container_of(docs)
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 10259, "health": 10260}
    assert "--metrics-port=10259" in container["args"]
    assert "--health-port=10260" in container["args"]
    probes = {probe: container[probe]["httpGet"] for probe in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes == {  # kube-scheduler's probes, on the secure port
        "startupProbe": {"path": "/livez", "port": "metrics", "scheme": "HTTPS"},
        "livenessProbe": {"path": "/livez", "port": "metrics", "scheme": "HTTPS"},
        "readinessProbe": {"path": "/readyz", "port": "metrics", "scheme": "HTTPS"},
    }
    resources = container["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert set(resources["limits"]) == {"memory"}  # no CPU limit: throttling delays peering keep-alives
    assert template["spec"]["priorityClassName"] == "system-cluster-critical"
    anti = template["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert anti[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_hard_anti_affinity_and_custom_affinity() -> None:
    pod = one(docs_of({"podAntiAffinity": "hard"}), "StatefulSet")["spec"]["template"]["spec"]
    required = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required[0]["topologyKey"] == "kubernetes.io/hostname"
    custom = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
    pod = one(docs_of({"affinity": custom}), "StatefulSet")["spec"]["template"]["spec"]
    assert pod["affinity"] == custom


def test_pdb_and_service_select_the_pods() -> None:
    docs = docs_of()
    labels = one(docs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = headless(docs)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 10259, "targetPort": "metrics", "protocol": "TCP"}]
    assert not [d for d in docs_of({"podDisruptionBudget": {"enabled": False}}) if d["kind"] == "PodDisruptionBudget"]
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]  # off by default


def test_namespaces_log_settings_and_extra_args_reach_the_command() -> None:
    container = container_of(docs_of(FULL_VALUES | {"logLevel": "debug", "logFormat": "json"}))
    assert container["command"] == ["kopf-scheduler", "run"]  # no shell: every flag is a plain argument
    args = container["args"]
    assert "--namespace=team-a" in args
    assert "--namespace=team-b" in args
    assert "--log-level=debug" in args
    assert "--log-format=json" in args
    assert args[-2:] == ["--pod-max-backoff-seconds", "20"]


def _effective_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pod_id: str, values: Mapping[str, Any]
) -> dict[str, Any]:
    """The settings the chart's container command resolves to in the replica named ``pod_id``."""
    from kopf_scheduler.cli import main

    container = container_of(docs_of(values))
    assert container["command"][0] == "kopf-scheduler"
    assert {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    out = tmp_path / f"{pod_id}.yaml"
    monkeypatch.setenv("POD_ID", pod_id)
    assert main([*container["command"][1:], *container["args"], f"--write-config-to={out}"]) == 0
    return yaml.safe_load(out.read_text())


def test_each_ordinal_gets_its_own_peering_priority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = {"peering": {"name": "sched-a", "priorityBase": 100, "lifetime": 20}, "namespaces": ["team-a"]}
    priorities = {
        ordinal: _effective_settings(tmp_path, monkeypatch, f"rel-kopf-scheduler-{ordinal}", values)["peeringPriority"]
        for ordinal in (0, 1, 2, 11)
    }
    assert priorities == {0: 100, 1: 99, 2: 98, 11: 89}
    settings = _effective_settings(tmp_path, monkeypatch, "rel-kopf-scheduler-0", values)
    assert (settings["peeringName"], settings["peeringLifetime"], settings["namespaces"]) == ("sched-a", 20, ["team-a"])


# ---- values -----------------------------------------------------------------------------------------------


def test_profiles_are_deleted_on_uninstall_unless_kept() -> None:
    """The pre-delete hook removes the operator's finalizer first, so deleting them never hangs."""
    profiles = [{"name": "p"}]
    kept = one(docs_of({"profiles": profiles, "keepProfiles": True}), "SchedulerProfile")
    assert kept["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    plain = one(docs_of({"profiles": profiles}), "SchedulerProfile")
    assert "annotations" not in plain["metadata"]
    assert not [d for d in docs_of() if d["kind"] == "SchedulerProfile"]  # none by default


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicas": "two"}, "/replicas"),
        ({"replicas": 0}, "/replicas"),
        ({"replica": 2}, "additional properties 'replica' not allowed"),
        ({"image": {"repository": "x", "pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"logLevel": "trace"}, "/logLevel"),
        ({"podAntiAffinity": "strict"}, "/podAntiAffinity"),
        ({"peering": {"name": "Bad_Name", "priorityBase": 1, "lifetime": 15}}, "/peering/name"),
        ({"peering": {"name": "ok", "priorityBase": 1, "lifetime": 1}}, "/peering/lifetime"),
        ({"metrics": {"port": 70000}}, "/metrics/port"),
        ({"profiles": [{"spec": {}}]}, "/profiles/0"),
        ({"profiles": [{"name": "UPPER"}]}, "/profiles/0/name"),
        ({"profiles": [{"name": "p", "spec": []}]}, "/profiles/0/spec"),
        ({"namespaces": ["Not A Namespace"]}, "/namespaces/0"),
    ],
)
def test_values_schema_rejects_bad_values(values: dict[str, Any], message: str) -> None:
    result = render(values, check=False)
    assert isinstance(result, subprocess.CompletedProcess)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_values_yaml_documents_every_schema_key() -> None:
    """values.yaml and values.schema.json list the same top-level keys (besides Helm's `global`)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(schema["properties"]) - {"global"} == set(values)
    assert schema["additionalProperties"] is False


# ---- secure serving and monitoring (issue 13) --------------------------------------------------------------


def reader_roles(docs: list[dict[str, Any]], kind: str = "ClusterRole") -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == "ks-kopf-scheduler-metrics-reader"]


def test_metrics_reader_role_grants_metrics_explain_and_the_way_to_the_active_replica_only() -> None:
    """/metrics and /explain/*, plus what explain through the API server needs (issue 14), nothing more:
    the peering object by name, the StatefulSet's pods by name, pods/proxy to their HTTPS metrics port only."""
    docs = docs_of()
    (cluster_role,) = reader_roles(docs)
    assert cluster_role["rules"] == [
        {"nonResourceURLs": ["/metrics", "/explain/*"], "verbs": ["get"]},
        {
            "apiGroups": ["kopf.dev"],
            "resources": ["clusterkopfpeerings"],
            "resourceNames": ["kopf-scheduler"],
            "verbs": ["get"],
        },
        {"apiGroups": ["explain.kopf-scheduler.io"], "resources": ["podexplanations"], "verbs": ["get"]},
    ]
    (role,) = reader_roles(docs, "Role")
    assert role["metadata"]["namespace"] == "kube-system"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "resourceNames": ["ks-kopf-scheduler-0", "ks-kopf-scheduler-1"],
            "verbs": ["get"],
        },
        {
            "apiGroups": [""],
            "resources": ["pods/proxy"],
            "resourceNames": ["https:ks-kopf-scheduler-0:10259", "https:ks-kopf-scheduler-1:10259"],
            "verbs": ["get"],
        },
    ]
    assert not [d for d in docs if d["kind"].endswith("RoleBinding") and d["metadata"]["name"].endswith("-reader")]
    for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        (binding,) = reader_roles(docs_of(FULL_VALUES), kind)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": "ks-kopf-scheduler-metrics-reader",
        }
        assert binding["subjects"] == FULL_VALUES["metrics"]["reader"]["subjects"]


def test_metrics_reader_role_follows_replicas_port_and_peering_name() -> None:
    docs = docs_of({"replicas": 3, "metrics": {"port": 8443}, "peering": {"name": "sched-b"}})
    (role,) = reader_roles(docs, "Role")
    assert role["rules"][1]["resourceNames"] == [f"https:ks-kopf-scheduler-{i}:8443" for i in range(3)]
    assert reader_roles(docs)[0]["rules"][1]["resourceNames"] == ["sched-b"]


def test_the_peering_object_names_the_operators_namespace() -> None:
    """kopf-scheduler explain maps the active peer (a pod name) to a pod in this namespace."""
    peering = one(docs_of(namespace="sched-system"), "ClusterKopfPeering")
    assert peering["metadata"]["annotations"] == {"kopf-scheduler.io/namespace": "sched-system"}


def test_service_monitor_scrapes_https_with_a_token_under_the_chosen_job() -> None:
    docs = docs_of(FULL_VALUES)
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https"
    assert "bearerTokenFile" not in endpoint  # deprecated: the token of the chart's own scraper account instead
    secret = one(docs, "Secret")
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": secret["metadata"]["name"], "key": "token"},
    }
    assert secret["type"] == "kubernetes.io/service-account-token"
    account = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] == account)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "kube-system"}]
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == binding["roleRef"]["name"])
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]  # /metrics and nothing else
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    job_label = one(docs, "ServiceMonitor")["spec"]["jobLabel"]
    assert headless(docs)["metadata"]["labels"][job_label] == "kube-scheduler"
    assert headless(docs_of())["metadata"]["labels"][job_label] == "kopf-scheduler"


def test_a_tls_secret_is_mounted_and_served() -> None:
    docs = docs_of(FULL_VALUES)
    container = container_of(docs)
    assert "--tls-cert-file=/etc/kopf-scheduler/tls/tls.crt" in container["args"]
    assert "--tls-private-key-file=/etc/kopf-scheduler/tls/tls.key" in container["args"]
    assert {"name": "tls", "mountPath": "/etc/kopf-scheduler/tls", "readOnly": True} in container["volumeMounts"]
    volumes = one(docs, "StatefulSet")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "kopf-scheduler-tls", "defaultMode": 0o440}} in volumes
    assert not any("--tls" in a for a in container_of(docs_of())["args"])  # self-signed by default


def test_image_digest_wins_over_the_tag() -> None:
    digest = "sha256:" + "ab" * 32
    image = container_of(docs_of({"image": {"repository": "registry.example/ks", "tag": "dev", "digest": digest}}))
    assert image["image"] == f"registry.example/ks@{digest}"
    assert render({"image": {"repository": "x", "digest": "latest"}}, check=False).returncode != 0  # type: ignore[union-attr]


def test_network_policy_admits_the_metrics_port_from_the_given_peers() -> None:
    assert not [d for d in docs_of() if d["kind"] == "NetworkPolicy"]
    docs = docs_of(FULL_VALUES)
    policy = one(docs, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"] == one(docs, "StatefulSet")["spec"]["selector"]["matchLabels"]
    assert policy["policyTypes"] == ["Ingress"]
    metrics, health = policy["ingress"]
    assert metrics == {
        "ports": [{"port": "metrics", "protocol": "TCP"}],
        "from": FULL_VALUES["networkPolicy"]["metricsFrom"],
    }
    assert health == {"ports": [{"port": "health", "protocol": "TCP"}]}


def _exported_metric_names() -> set[str]:
    from kopf_scheduler.metrics import SchedulerMetrics

    names = set()
    for family in SchedulerMetrics().registry.collect():
        names.update(sample.name for sample in family.samples)
        names.add(family.name)
        if family.type in ("histogram",):
            names.update(f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


def _metric_names_in(expr: str) -> set[str]:
    import re

    return set(re.findall(r"\b((?:scheduler|leader|kopf|process|python)_[a-z_]+)\b", expr))


def test_dashboard_and_alerts_query_only_metrics_the_operator_exports() -> None:
    docs = docs_of(FULL_VALUES)
    exported = _exported_metric_names()
    dashboard = json.loads(one(docs, "ConfigMap")["data"]["kopf-scheduler.json"])
    assert one(docs, "ConfigMap")["metadata"]["labels"]["grafana_dashboard"] == "1"
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    rules = one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {
        "KopfSchedulerNoActiveReplica",
        "KopfSchedulerPodPendingTooLong",
        "KopfSchedulerPendingPodsRising",
        "KopfSchedulerAttemptsFailing",
    }
    by_name = {r["alert"]: r for r in rules}
    # Every replica down: no series at all, which absent() turns into an alert.
    assert by_name["KopfSchedulerNoActiveReplica"]["expr"].startswith("absent(leader_election_master_status{")
    assert by_name["KopfSchedulerPodPendingTooLong"]["expr"].endswith("> 900")
    exprs += [r["expr"] for r in rules]
    used = set().union(*map(_metric_names_in, exprs))
    assert {
        "scheduler_queue_incoming_pods_total",
        "scheduler_unschedulable_pods",
        "leader_election_master_status",
        "kopf_scheduler_longest_waiting_pod_seconds",
    } <= used
    assert used <= exported, used - exported
    assert all('job="kube-scheduler"' in r["expr"] for r in rules)  # the ServiceMonitor's jobLabel
    assert not [d for d in docs_of() if d["kind"] in ("ConfigMap", "PrometheusRule")]  # off by default


def test_every_value_in_the_schema_has_a_description() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    missing = []

    def walk(node: Mapping[str, Any], path: str) -> None:
        for key, sub in (node.get("properties") or {}).items():
            if "description" not in sub:
                missing.append(f"{path}.{key}")
            walk(sub, f"{path}.{key}")
        items = node.get("items")
        if isinstance(items, dict):
            walk(items, f"{path}[]")

    walk(schema, "")
    assert not missing


def test_helm_show_readme_is_the_chart_readme(tmp_path: Path) -> None:
    readme = helm("show", "readme", str(CHART), tmp_home=tmp_path).stdout
    assert readme.startswith("# kopf-scheduler")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key in values:  # every top-level value is documented
        assert f"`{key}" in readme, key


# ---- scheduler-plugins' Coscheduling PodGroup CRD (optional) -------------------------------------------------

COSCHEDULING_CRD = CHART / "files" / "coscheduling" / "scheduling.x-k8s.io_podgroups.yaml"


def test_the_coscheduling_crd_is_rendered_only_when_asked_and_kept_on_uninstall() -> None:
    """Off by default; on, it is the file the e2e tests apply (v0.34.7's schema), kept on uninstall (deleting it
    would delete every PodGroup). Where the cluster already has one another release owns, helm's lookup skips it:
    ``helm template`` cannot look up, so that branch is the e2e chart test's."""
    names = {d["metadata"]["name"] for d in docs_of() if d["kind"] == "CustomResourceDefinition"}
    assert "podgroups.scheduling.x-k8s.io" not in names
    [crd] = [
        d
        for d in docs_of({"coscheduling": {"installCRD": True}})
        if d["kind"] == "CustomResourceDefinition" and d["metadata"]["name"] == "podgroups.scheduling.x-k8s.io"
    ]
    shipped = yaml.safe_load(COSCHEDULING_CRD.read_text())
    assert crd["spec"] == shipped["spec"]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    version = crd["spec"]["versions"][0]
    assert (crd["spec"]["group"], version["name"], version["subresources"]) == (
        "scheduling.x-k8s.io",
        "v1alpha1",
        {"status": {}},
    )
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(spec) == {"minMember", "minResources", "scheduleTimeoutSeconds"}
    assert spec["minMember"]["minimum"] == 1


def test_the_explain_api_service_routes_to_the_active_replica_with_the_rbac_it_needs() -> None:
    """The APIService and its Service (the pod labelled active), the operator's rights to serve it (the requestheader
    ConfigMap, reviews, labelling its own pods), and get on podexplanations for whoever may view a namespace."""
    docs = docs_of()
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    api_service = by_name[("APIService", "v1alpha1.explain.kopf-scheduler.io")]
    assert api_service["spec"] == {
        "group": "explain.kopf-scheduler.io",
        "version": "v1alpha1",
        "service": {"name": "ks-kopf-scheduler-explain", "namespace": "kube-system", "port": 443},
        "groupPriorityMinimum": 100,
        "versionPriority": 100,
        "insecureSkipTLSVerify": True,
    }
    service = by_name[("Service", "ks-kopf-scheduler-explain")]
    assert service["spec"]["selector"]["kopf-scheduler.io/active"] == "true"
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "metrics", "protocol": "TCP"}]
    account = {
        "kind": "ServiceAccount",
        "name": one(docs, "ServiceAccount")["metadata"]["name"],
        "namespace": "kube-system",
    }
    delegator = by_name[("ClusterRoleBinding", "ks-kopf-scheduler-auth-delegator")]
    assert (delegator["roleRef"]["name"], delegator["subjects"]) == ("system:auth-delegator", [account])
    reader = by_name[("RoleBinding", "ks-kopf-scheduler-extension-apiserver-authentication")]
    assert reader["metadata"]["namespace"] == "kube-system"
    assert (reader["roleRef"]["name"], reader["subjects"]) == ("extension-apiserver-authentication-reader", [account])
    own = by_name[("Role", "ks-kopf-scheduler-own-pods")]
    assert own["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "resourceNames": ["ks-kopf-scheduler-0", "ks-kopf-scheduler-1"],
            "verbs": ["get", "patch"],
        }
    ]
    env = {e["name"]: e for e in container_of(docs)["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    viewer = by_name[("ClusterRole", "ks-kopf-scheduler-explain-viewer")]
    assert viewer["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert viewer["rules"] == [
        {"apiGroups": ["explain.kopf-scheduler.io"], "resources": ["podexplanations"], "verbs": ["get"]}
    ]

    pinned = docs_of({"explain": {"apiService": {"caBundle": "Q0E="}, "aggregateToDefaultRoles": False}})
    spec = next(d for d in pinned if d["kind"] == "APIService")["spec"]
    assert spec["caBundle"] == "Q0E="
    assert "insecureSkipTLSVerify" not in spec
    assert not [d for d in pinned if d["metadata"]["name"].endswith("-explain-viewer")]
    off = docs_of({"explain": {"apiService": {"enabled": False}}})
    assert not [
        d for d in off if d["kind"] == "APIService" or d["metadata"]["name"].endswith(("-explain", "-own-pods"))
    ]
