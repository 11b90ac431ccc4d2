"""The chart's `helm test` hook, offline: its objects (templates/tests/) and its check (files/hooks.py `test`).

The objects: rendered with the test hooks, valid against the pinned Kubernetes schemas, Pod Security
"restricted", annotated as test hooks, and granted exactly the calls the check makes. The check: its
verdicts on API objects given by hand, including each way a release can be unhealthy, and the probe pod it
sends through the test's own SchedulerProfile. tests/e2e/test_helm_lifecycle.py runs `helm test` itself, the
check in the built image, against a real control plane.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest

from tests.unit.test_chart import CHART, FULL_VALUES, KUBE_VERSION, SCHEMA_MINOR, docs_of, rules_of

CRDS = ["schedulerprofiles.kopf-scheduler.io", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"]
SCRIPT = CHART / "files" / "hooks.py"


def _check_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_hooks", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _check_module()


def hook_docs(values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    docs = docs_of(values, include_tests=True)
    return [d for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]


# ---- the hook's objects ---------------------------------------------------------------------------------------


def test_install_creates_no_test_hook_object() -> None:
    assert not [d for d in docs_of() if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]


@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["defaults", "everything-on"])
def test_hook_objects_validate_and_are_test_hooks(values: dict[str, Any] | None) -> None:
    docs = hook_docs(values)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole", "ClusterRoleBinding", "Pod", "Role", "RoleBinding", "SchedulerProfile", "ServiceAccount"
    ]  # fmt: skip
    for doc in docs:
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "test"
        # Kept when the test fails (its log is the diagnosis), replaced by the next `helm test`.
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        # The identity exists before the Pod that uses it.
        assert int(annotations.get("helm.sh/hook-weight", "0")) < 0 or doc["kind"] == "Pod"
        if doc["kind"] == "SchedulerProfile":  # no schema for our own kind: the probe's is the default profile
            assert doc["spec"] == {}
            continue
        assert kubernetes_validate.validate(doc, KUBE_VERSION, strict=True) == SCHEMA_MINOR
    probe = json.loads(_probe_arg(docs))
    assert kubernetes_validate.validate(probe, KUBE_VERSION, strict=True) == SCHEMA_MINOR


def _probe_arg(docs: list[dict[str, Any]]) -> str:
    (container,) = next(d for d in docs if d["kind"] == "Pod")["spec"]["containers"]
    (probe,) = [arg.split("=", 1)[1] for arg in container["args"] if arg.startswith("--probe-pod=")]
    return probe


def test_hook_is_granted_exactly_the_reads_of_the_check() -> None:
    docs = hook_docs({"peering": {"name": "sched-a", "priorityBase": 100, "lifetime": 15}})
    by_kind = {d["kind"]: d for d in docs}
    account = by_kind["ServiceAccount"]["metadata"]["name"]
    assert account == "ks-kopf-scheduler-test"
    assert rules_of(by_kind["ClusterRole"]) == {
        *(("apiextensions.k8s.io", "customresourcedefinitions", crd, "get") for crd in CRDS),
        ("kopf.dev", "clusterkopfpeerings", "sched-a", "get"),
        ("kopf-scheduler.io", "schedulerprofiles", "ks-kopf-scheduler-probe", "get"),
    }
    assert rules_of(by_kind["Role"]) == {
        ("apps", "statefulsets", "ks-kopf-scheduler", "get"),
        ("", "pods", "", "create"),
        ("", "pods", "ks-kopf-scheduler-probe", "get"),
        ("", "pods", "ks-kopf-scheduler-probe", "delete"),
    }
    for binding, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        assert by_kind[binding]["roleRef"]["name"] == by_kind[role]["metadata"]["name"]
        assert by_kind[binding]["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "kube-system"}]
    assert by_kind["Pod"]["spec"]["serviceAccountName"] == account


def test_hook_pod_runs_the_check_in_the_operator_image_under_pod_security_restricted() -> None:
    docs = docs_of(FULL_VALUES, include_tests=True)
    statefulset_pod = next(d for d in docs if d["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    pod = next(d for d in docs if d["kind"] == "Pod")["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"] == statefulset_pod["securityContext"]
    (container,) = pod["containers"]
    operator = statefulset_pod["containers"][0]
    assert container["image"] == operator["image"]
    assert container["securityContext"] == operator["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["command"] == ["python3", "-c", SCRIPT.read_text()]
    assert container["args"][:-1] == [
        "test",
        "--namespace=kube-system",
        "--statefulset=ks-kopf-scheduler",
        f"--peering={FULL_VALUES.get('peering', {}).get('name', 'kopf-scheduler')}",
        *(f"--crd={crd}" for crd in CRDS),
        "--timeout=120",
        "--probe-timeout=60",
    ]
    # The probe: scheduled by the test's own profile, placed as the chart's pods are, restricted, no token.
    probe_profile = next(
        d for d in docs if d["kind"] == "SchedulerProfile" and "helm.sh/hook" in d["metadata"].get("annotations", {})
    )
    probe = json.loads(_probe_arg(docs))
    assert probe["metadata"]["name"] == probe["spec"]["schedulerName"] == probe_profile["metadata"]["name"]
    assert probe_profile["metadata"]["annotations"]["helm.sh/hook-weight"] == "-1"  # Ready before the check runs
    assert (probe["spec"]["nodeSelector"], probe["spec"]["tolerations"]) == (
        statefulset_pod["nodeSelector"],
        statefulset_pod["tolerations"],
    )
    assert probe["spec"]["automountServiceAccountToken"] is False
    assert probe["spec"]["securityContext"] == statefulset_pod["securityContext"]
    assert probe["spec"]["containers"][0]["securityContext"] == operator["securityContext"]


# ---- the check ------------------------------------------------------------------------------------------------

NOW = datetime.datetime(2026, 11, 23, 12, 0, 0, tzinfo=datetime.UTC)


def _peer(priority: int, seconds_ago: float, lifetime: int = 15) -> dict[str, Any]:
    lastseen = (NOW - datetime.timedelta(seconds=seconds_ago)).isoformat()
    return {"priority": priority, "lifetime": lifetime, "lastseen": lastseen}


def _cluster(**changes: Any) -> dict[str, Mapping[str, Any] | None]:
    """API path → object of a healthy two-replica release; ``changes`` replaces some of them."""
    established = {"status": {"conditions": [{"type": "Established", "status": "True"}]}}
    objects: dict[str, Mapping[str, Any] | None] = {check.CRD_PATH.format(name=crd): established for crd in CRDS}
    objects[check.STATEFULSET_PATH.format(namespace="ns", name="rel")] = changes.get(
        "statefulset", {"spec": {"replicas": 2}, "status": {"readyReplicas": 2}}
    )
    peers = changes.get("peers", {"rel-0": _peer(100, 3), "rel-1": _peer(99, 5)})
    objects[check.PEERING_PATH.format(name="peering")] = changes.get("peering", {"status": peers})
    objects.update(changes.get("paths", {}))
    return objects


ARGS = ["test", "--namespace=ns", "--statefulset=rel", "--peering=peering", *(f"--crd={c}" for c in CRDS),
        "--timeout=0"]  # fmt: skip


def _verdicts(objects: Mapping[str, Mapping[str, Any] | None]) -> list[tuple[bool, str]]:
    return check.verdicts(check.parse_args(ARGS), objects.get, NOW)  # type: ignore[no-any-return]


def reader(objects: Mapping[str, Mapping[str, Any] | None]) -> Any:
    """A Requester over ``objects`` that only reads (the health checks make GETs only)."""

    def request(method: str, path: str, body: Any, content_type: str) -> Mapping[str, Any] | None:
        assert method == "GET", (method, path)
        return objects.get(path)

    return request


def test_a_healthy_release_passes_every_check(capsys: pytest.CaptureFixture[str]) -> None:
    results = _verdicts(_cluster())
    assert all(ok for ok, _ in results), results
    assert results[-1][1] == "ClusterKopfPeering peering: one active peer, rel-0 (priority 100), of 2 live"
    assert check.main(ARGS, request=reader(_cluster()), clock=lambda: NOW) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(CRDS) + 2
    assert all(line.startswith("ok ") for line in out)


@pytest.mark.parametrize(
    ("changes", "failure"),
    [
        ({"paths": {check.CRD_PATH.format(name=CRDS[0]): None}}, f"CRD {CRDS[0]}: missing"),
        (
            {"paths": {check.CRD_PATH.format(name=CRDS[1]): {"status": {"conditions": []}}}},
            f"CRD {CRDS[1]}: not Established",
        ),
        ({"statefulset": {"spec": {"replicas": 2}, "status": {"readyReplicas": 1}}}, "1/2 replicas Ready"),
        ({"statefulset": None}, "StatefulSet rel: missing"),
        ({"peering": None}, "ClusterKopfPeering peering: missing"),
        # A replica that stopped its keepalives: its lastseen + lifetime is behind us.
        ({"peers": {"rel-0": _peer(100, 3), "rel-1": _peer(99, 16)}}, "no live peer for rel-1 (live: ['rel-0'])"),
        ({"peers": {"rel-0": _peer(100, 3)}}, "no live peer for rel-1"),
        # Same top priority: kopf pauses both, nothing schedules.
        ({"peers": {"rel-0": _peer(100, 3), "rel-1": _peer(100, 1)}}, "2 live peers share the top priority 100"),
    ],
)
def test_each_unhealthy_state_fails_its_check(
    changes: dict[str, Any], failure: str, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = _cluster(**changes)
    failed = [message for ok, message in _verdicts(objects) if not ok]
    assert len(failed) == 1, failed
    assert failure in failed[0]
    assert check.main(ARGS, request=reader(objects), clock=lambda: NOW) == 1
    assert f"FAIL {failed[0]}" in capsys.readouterr().out


def test_a_dead_peer_with_a_higher_priority_does_not_count() -> None:
    """A crashed replica's entry lingers until kopf cleans it; the live top priority is what is active."""
    peers = {"old": _peer(500, 60), "rel-0": _peer(100, 3), "rel-1": _peer(99, 5)}
    ok, message = _verdicts(_cluster(peers=peers))[-1]
    assert ok, message
    assert "rel-0 (priority 100), of 2 live" in message


def test_the_check_retries_until_the_release_is_healthy() -> None:
    healthy, calls = _cluster(), []
    unready = _cluster(statefulset={"spec": {"replicas": 2}, "status": {}})

    def request(method: str, path: str, body: Any, content_type: str) -> Mapping[str, Any] | None:
        calls.append(path)
        return (unready if len(calls) <= len(healthy) else healthy).get(path)

    args = [*ARGS[:-1], "--timeout=30", "--interval=0"]
    assert check.main(args, request=request, clock=lambda: NOW) == 0
    assert len(calls) == 2 * len(healthy)


def test_an_api_error_is_reported_not_raised(capsys: pytest.CaptureFixture[str]) -> None:
    def request(method: str, path: str, body: Any, content_type: str) -> Mapping[str, Any] | None:
        raise OSError("connection refused")

    assert check.main(ARGS, request=request) == 1
    assert "FAIL API request failed: connection refused" in capsys.readouterr().out


# ---- the probe pod --------------------------------------------------------------------------------------------

PROBE = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rel-probe", "namespace": "ns"},
         "spec": {"schedulerName": "rel-probe", "containers": [{"name": "probe", "image": "i"}]}}  # fmt: skip
PROBE_PATH = check.POD_PATH.format(namespace="ns", name="rel-probe")
READY = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}


class FakeApi:
    """The healthy release's objects, plus a probe profile and a pod store a scheduler may bind into."""

    def __init__(self, *, profile: Mapping[str, Any] | None = READY, binds_after: int | None = 1) -> None:
        self.objects: dict[str, Mapping[str, Any] | None] = {**_cluster()}
        self.objects[check.PROFILE_PATH.format(name="rel-probe")] = profile
        self.binds_after = binds_after  # GETs of the created pod before it shows a node; None: never
        self.calls: list[tuple[str, str]] = []
        self.created: list[Any] = []
        self._reads = 0

    def __call__(self, method: str, path: str, body: Any, content_type: str) -> Mapping[str, Any] | None:
        self.calls.append((method, path))
        if method == "POST":
            assert path == check.PODS_PATH.format(namespace="ns")
            self.created.append(body)
            self.objects[PROBE_PATH] = {**body, "status": {}}
            self._reads = 0
            return body
        if method == "DELETE":
            return self.objects.pop(path, None)
        pod = self.objects.get(path)
        if path == PROBE_PATH and pod is not None:
            self._reads += 1
            if self.binds_after is not None and self._reads > self.binds_after:
                return {**pod, "spec": {**pod["spec"], "nodeName": "node-1"}}
            unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                             "message": "0/3 nodes are available: 3 Insufficient cpu."}  # fmt: skip
            return {**pod, "status": {"conditions": [unschedulable]}}
        return pod


def _probe(api: FakeApi, *extra: str) -> int:
    args = [*ARGS[:-1], "--timeout=0", "--interval=0", f"--probe-pod={json.dumps(PROBE)}", *extra]
    return check.main(args, request=api, clock=lambda: NOW, sleep=lambda _: None)  # type: ignore[no-any-return]


def test_the_probe_pod_is_bound_through_the_probe_profile_then_deleted(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi(binds_after=2)
    assert _probe(api, "--probe-timeout=5") == 0
    assert api.created == [PROBE]
    assert "ok   probe: pod rel-probe bound to node-1 by rel-probe in" in capsys.readouterr().out
    assert api.calls[-1] == ("DELETE", PROBE_PATH)  # nothing left behind
    assert PROBE_PATH not in api.objects
    # The profile was Ready before the pod was sent.
    profile_read = api.calls.index(("GET", check.PROFILE_PATH.format(name="rel-probe")))
    assert profile_read < api.calls.index(("POST", check.PODS_PATH.format(namespace="ns")))


def test_an_unbound_probe_fails_with_its_schedulers_reason(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi(binds_after=None)
    assert _probe(api, "--probe-timeout=0") == 1
    out = capsys.readouterr().out
    assert "FAIL probe: pod rel-probe not bound by rel-probe: Unschedulable: 0/3 nodes are available" in out
    assert PROBE_PATH not in api.objects  # deleted all the same


def test_no_probe_without_a_ready_profile_or_a_healthy_release(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi(profile={"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert _probe(api, "--probe-timeout=0") == 1
    assert "FAIL probe: SchedulerProfile rel-probe not Ready" in capsys.readouterr().out
    assert not api.created
    unhealthy = FakeApi()
    unhealthy.objects[check.STATEFULSET_PATH.format(namespace="ns", name="rel")] = None
    assert _probe(unhealthy) == 1
    assert not unhealthy.created  # the probe needs an active replica: not sent at all


def test_a_probe_a_failed_run_left_behind_is_replaced() -> None:
    api = FakeApi()
    api.objects[PROBE_PATH] = {"metadata": {"name": "rel-probe"}, "spec": {"nodeName": "stale"}}
    assert _probe(api, "--probe-timeout=5") == 0
    first_delete = api.calls.index(("DELETE", PROBE_PATH))
    assert first_delete < api.calls.index(("POST", check.PODS_PATH.format(namespace="ns")))
