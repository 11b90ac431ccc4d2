"""The chart's `helm test` hook, offline: its objects (templates/tests/) and its check (files/helm_test.py).

The objects: rendered with the test hooks, valid against the pinned Kubernetes schemas, Pod Security
"restricted", annotated as test hooks, and granted exactly the reads the check makes. The check: its
verdicts on API objects given by hand, including each way a release can be unhealthy. tests/e2e/
test_image.py runs the same command in the built image against a real control plane.
"""

from __future__ import annotations

import datetime
import importlib.util
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest

from tests.unit.test_chart import CHART, FULL_VALUES, KUBE_VERSION, SCHEMA_MINOR, docs_of, rules_of

CRDS = ["schedulerprofiles.kopf-scheduler.io", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"]
SCRIPT = CHART / "files" / "helm_test.py"


def _check_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("helm_test", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _check_module()


def hook_docs(values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    return [d for d in docs_of(values, include_tests=True) if "helm.sh/hook" in d["metadata"].get("annotations", {})]


# ---- the hook's objects ---------------------------------------------------------------------------------------


def test_install_creates_no_hook_object() -> None:
    assert not [d for d in docs_of() if "helm.sh/hook" in d["metadata"].get("annotations", {})]


@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["defaults", "everything-on"])
def test_hook_objects_validate_and_are_test_hooks(values: dict[str, Any] | None) -> None:
    docs = hook_docs(values)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Pod", "Role", "RoleBinding", "ServiceAccount"]
    for doc in docs:
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "test"
        # Kept when the test fails (its log is the diagnosis), replaced by the next `helm test`.
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        # The identity exists before the Pod that uses it.
        assert int(annotations.get("helm.sh/hook-weight", "0")) < 0 or doc["kind"] == "Pod"
        assert kubernetes_validate.validate(doc, KUBE_VERSION, strict=True) == SCHEMA_MINOR


def test_hook_is_granted_exactly_the_reads_of_the_check() -> None:
    docs = hook_docs({"peering": {"name": "sched-a", "priorityBase": 100, "lifetime": 15}})
    by_kind = {d["kind"]: d for d in docs}
    account = by_kind["ServiceAccount"]["metadata"]["name"]
    assert account == "ks-kopf-scheduler-test"
    assert rules_of(by_kind["ClusterRole"]) == {
        *(("apiextensions.k8s.io", "customresourcedefinitions", crd, "get") for crd in CRDS),
        ("kopf.dev", "clusterkopfpeerings", "sched-a", "get"),
    }
    assert rules_of(by_kind["Role"]) == {("apps", "statefulsets", "ks-kopf-scheduler", "get")}
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
    assert container["args"] == [
        "--namespace=kube-system",
        "--statefulset=ks-kopf-scheduler",
        f"--peering={FULL_VALUES.get('peering', {}).get('name', 'kopf-scheduler')}",
        *(f"--crd={crd}" for crd in CRDS),
        "--timeout=120",
    ]


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


ARGS = ["--namespace=ns", "--statefulset=rel", "--peering=peering", *(f"--crd={c}" for c in CRDS), "--timeout=0"]


def _verdicts(objects: Mapping[str, Mapping[str, Any] | None]) -> list[tuple[bool, str]]:
    return check.verdicts(check.parse_args(ARGS), objects.get, NOW)  # type: ignore[no-any-return]


def test_a_healthy_release_passes_every_check(capsys: pytest.CaptureFixture[str]) -> None:
    results = _verdicts(_cluster())
    assert all(ok for ok, _ in results), results
    assert results[-1][1] == "ClusterKopfPeering peering: one active peer, rel-0 (priority 100), of 2 live"
    assert check.main(ARGS, get=_cluster().get, clock=lambda: NOW) == 0
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
    assert check.main(ARGS, get=objects.get, clock=lambda: NOW) == 1
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

    def get(path: str) -> Mapping[str, Any] | None:
        calls.append(path)
        return (unready if len(calls) <= len(healthy) else healthy).get(path)

    args = [*ARGS[:-1], "--timeout=30", "--interval=0"]
    assert check.main(args, get=get, clock=lambda: NOW) == 0
    assert len(calls) == 2 * len(healthy)


def test_an_api_error_is_reported_not_raised(capsys: pytest.CaptureFixture[str]) -> None:
    def get(path: str) -> Mapping[str, Any] | None:
        raise OSError("connection refused")

    assert check.main(ARGS, get=get) == 1
    assert "FAIL API request failed: connection refused" in capsys.readouterr().out
