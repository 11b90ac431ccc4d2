"""The chart's pre-delete hook, offline: its objects (templates/pre-delete-hook.yaml) and its run (files/hooks.py
`pre-delete`).

Why: `helm uninstall` must not leave a SchedulerProfile holding the operator's finalizer once the operator is
gone (``kubectl delete sp`` would hang). The objects: pre-delete hooks, valid against the pinned Kubernetes
schemas, Pod Security "restricted", granted exactly the calls the run makes. The run, against a fake API: the
replicas are stopped before any finalizer is touched, only the operator's finalizer goes, a conflict is
retried, and a replica still alive stops it all with a failure (which stops the uninstall). tests/e2e/
test_helm_lifecycle.py runs the hook in the built image during a real `helm uninstall`. Also the pre-upgrade
hook's run (files/hooks.py `apply-crds`), which server-side applies the chart's CRD.
"""

from __future__ import annotations

import datetime
import json
import urllib.error
from collections.abc import Mapping
from email.message import Message
from typing import Any

import kubernetes_validate
import pytest

from tests.unit.test_chart import FULL_VALUES, KUBE_VERSION, SCHEMA_MINOR, docs_of, one, rules_of
from tests.unit.test_chart_test_hook import SCRIPT, check

FINALIZER = "kopf-scheduler.io/profile-cleanup"


def hook_docs(values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    docs = docs_of(values, include_hooks=True)
    return [d for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "pre-delete"]


# ---- the hook's objects ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["defaults", "everything-on"])
def test_hook_objects_are_pre_delete_hooks_that_validate(values: dict[str, Any] | None) -> None:
    docs = hook_docs(values)
    assert sorted(d["kind"] for d in docs) == [
        "ClusterRole", "ClusterRoleBinding", "Job", "Role", "RoleBinding", "ServiceAccount"
    ]  # fmt: skip
    for doc in docs:
        annotations = doc["metadata"]["annotations"]
        # Kept when it fails (its log is the diagnosis; the uninstall stops), replaced by the next attempt.
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        assert int(annotations["helm.sh/hook-weight"]) == (0 if doc["kind"] == "Job" else -1)
        assert kubernetes_validate.validate(doc, KUBE_VERSION, strict=True) == SCHEMA_MINOR
    assert not [d for d in docs_of(values) if d["kind"] == "Job"]  # nothing of it on install


def test_hook_is_granted_exactly_the_calls_of_the_run() -> None:
    docs = hook_docs({"peering": {"name": "sched-a", "priorityBase": 100, "lifetime": 15}})
    by_kind = {d["kind"]: d for d in docs}
    account = by_kind["ServiceAccount"]["metadata"]["name"]
    assert account == "ks-kopf-scheduler-pre-delete"
    assert rules_of(by_kind["ClusterRole"]) == {
        ("kopf-scheduler.io", "schedulerprofiles", "", "list"),
        ("kopf-scheduler.io", "schedulerprofiles", "", "patch"),
        ("kopf-scheduler.io", "schedulerprofiles", "ks-kopf-scheduler-probe", "delete"),
        ("kopf.dev", "clusterkopfpeerings", "sched-a", "get"),
    }
    assert rules_of(by_kind["Role"]) == {
        ("apps", "statefulsets/scale", "ks-kopf-scheduler", "patch"),
        ("", "pods", "", "list"),
    }
    for binding, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        assert by_kind[binding]["roleRef"]["name"] == by_kind[role]["metadata"]["name"]
        assert by_kind[binding]["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "kube-system"}]
    assert by_kind["Job"]["spec"]["template"]["spec"]["serviceAccountName"] == account


def test_the_job_runs_the_hook_in_the_operator_image_under_pod_security_restricted() -> None:
    docs = docs_of(FULL_VALUES, include_hooks=True)
    statefulset = one(docs, "StatefulSet")
    operator_pod = statefulset["spec"]["template"]["spec"]
    (job,) = [d for d in docs if d["kind"] == "Job" and d["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"]
    pod = job["spec"]["template"]["spec"]
    assert (pod["restartPolicy"], job["spec"]["backoffLimit"]) == ("Never", 0)
    assert pod["securityContext"] == operator_pod["securityContext"]
    assert (pod["nodeSelector"], pod["tolerations"]) == (operator_pod["nodeSelector"], operator_pod["tolerations"])
    (container,) = pod["containers"]
    assert container["image"] == operator_pod["containers"][0]["image"]
    assert container["securityContext"] == operator_pod["containers"][0]["securityContext"]
    assert container["command"] == ["python3", "-c", SCRIPT.read_text()]
    selector = ",".join(f"{k}={v}" for k, v in sorted(statefulset["spec"]["selector"]["matchLabels"].items()))
    assert container["args"] == [
        "pre-delete",
        "--namespace=kube-system",
        "--statefulset=ks-kopf-scheduler",
        f"--selector={selector}",
        "--peering=kopf-scheduler",
        f"--finalizer={FINALIZER}",
        "--delete-profile=ks-kopf-scheduler-probe",
        "--timeout=105",  # terminationGracePeriodSeconds 30 + peering lifetime 15 + 60
    ]
    assert job["spec"]["activeDeadlineSeconds"] > 2 * 105  # the run's two waits end first


def test_the_finalizer_is_the_operators() -> None:
    from kopf_scheduler.handlers import FINALIZER as OPERATOR_FINALIZER

    assert OPERATOR_FINALIZER == FINALIZER


# ---- the run --------------------------------------------------------------------------------------------------

NOW = datetime.datetime(2026, 11, 23, 12, 0, 0, tzinfo=datetime.UTC)
ARGS = ["pre-delete", "--namespace=ns", "--statefulset=rel", "--selector=app=rel", "--peering=peering",
        f"--finalizer={FINALIZER}", "--delete-profile=rel-probe", "--timeout=5", "--interval=0"]  # fmt: skip
SCALE = check.SCALE_PATH.format(namespace="ns", name="rel")
PEERING = check.PEERING_PATH.format(name="peering")
PODS = check.PODS_PATH.format(namespace="ns") + "?labelSelector=app%3Drel"


def _peer(seconds_ago: float) -> dict[str, Any]:
    return {"priority": 100, "lifetime": 15, "lastseen": (NOW - datetime.timedelta(seconds=seconds_ago)).isoformat()}


def _profile(name: str, *finalizers: str, version: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version, "finalizers": list(finalizers)}}


class FakeCluster:
    """A release whose replicas stop ``stops_after`` peering reads after the scale-down (None: never)."""

    def __init__(self, profiles: list[dict[str, Any]], *, stops_after: int | None = 1, conflicts: int = 0) -> None:
        self.profiles = {p["metadata"]["name"]: p for p in profiles}
        self.stops_after, self.conflicts = stops_after, conflicts
        self.scaled = False
        self.peering_reads = 0
        self.calls: list[tuple[str, str]] = []

    def _stopped(self) -> bool:
        return self.scaled and self.stops_after is not None and self.peering_reads > self.stops_after

    def __call__(self, method: str, path: str, body: Any, content_type: str) -> Mapping[str, Any] | None:
        self.calls.append((method, path))
        if (method, path) == ("PATCH", SCALE):
            assert body == {"spec": {"replicas": 0}}
            assert content_type == check.MERGE_PATCH
            self.scaled = True
            return {"spec": {"replicas": 0}}
        if (method, path) == ("GET", PEERING):
            self.peering_reads += self.scaled
            return {"status": {} if self._stopped() else {"rel-0": _peer(2), "rel-1": _peer(3)}}
        if (method, path) == ("GET", PODS):
            replica = {"metadata": {"name": "rel-0", "ownerReferences": [{"kind": "StatefulSet", "name": "rel"}]}}
            hook = {"metadata": {"name": "rel-pre-delete-x", "ownerReferences": [{"kind": "Job", "name": "rel"}]}}
            return {"items": [hook] if self._stopped() else [replica, hook]}  # the hook's own pod matches too
        if (method, path) == ("GET", check.PROFILES_PATH):
            return {"items": list(self.profiles.values())}
        name = path.rsplit("/", 1)[1]
        if method == "DELETE":
            return self.profiles.pop(name, None)
        assert method == "PATCH", (method, path)
        assert content_type == check.MERGE_PATCH
        assert self._stopped(), "a finalizer touched while a replica runs (it would put it back)"
        if self.conflicts:
            self.conflicts -= 1
            self.profiles[name]["metadata"]["resourceVersion"] += "'"  # someone else wrote it meanwhile
            raise urllib.error.HTTPError(path, 409, "Conflict", Message(), None)
        meta = self.profiles[name]["metadata"]
        assert body["metadata"]["resourceVersion"] == meta["resourceVersion"]
        meta["finalizers"] = body["metadata"]["finalizers"] or []
        return self.profiles[name]


def _run(cluster: FakeCluster) -> int:
    return check.main(ARGS, request=cluster, clock=lambda: NOW, sleep=lambda _: None)  # type: ignore[no-any-return]


def test_replicas_stop_first_then_only_the_operators_finalizer_goes(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = FakeCluster(
        [
            _profile("chart-profile", FINALIZER),
            _profile("users-profile", "example.com/other", FINALIZER),
            _profile("no-finalizer"),
            _profile("rel-probe", FINALIZER),
        ]
    )
    assert _run(cluster) == 0
    assert cluster.calls[0] == ("PATCH", SCALE)
    finalizers = {name: p["metadata"]["finalizers"] for name, p in cluster.profiles.items()}
    assert finalizers == {"chart-profile": [], "users-profile": ["example.com/other"], "no-finalizer": []}
    assert ("DELETE", check.PROFILE_PATH.format(name="rel-probe")) in cluster.calls  # a failed test's probe
    out = capsys.readouterr().out
    assert "ok   StatefulSet rel: scaled to 0" in out
    assert "ok   ClusterKopfPeering peering: live peers: none" in out
    assert "ok   replica pods left: none" in out
    assert f"ok   {FINALIZER} removed from 3 SchedulerProfile(s): chart-profile, users-profile, rel-probe" in out


def test_a_conflict_is_read_again_and_retried() -> None:
    cluster = FakeCluster([_profile("p", FINALIZER)], conflicts=2)
    assert _run(cluster) == 0
    assert cluster.profiles["p"]["metadata"]["finalizers"] == []
    patches = [call for call in cluster.calls if call == ("PATCH", check.PROFILE_PATH.format(name="p"))]
    assert len(patches) == 3


def test_a_replica_still_alive_fails_the_hook_and_touches_no_finalizer(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = FakeCluster([_profile("p", FINALIZER)], stops_after=None)
    args = [*ARGS[:-2], "--timeout=0", "--interval=0"]
    assert check.main(args, request=cluster, clock=lambda: NOW, sleep=lambda _: None) == 1
    assert cluster.profiles["p"]["metadata"]["finalizers"] == [FINALIZER]
    assert "FAIL ClusterKopfPeering peering: live peers: rel-0, rel-1" in capsys.readouterr().out


def test_no_release_left_to_stop_still_releases_the_finalizers(capsys: pytest.CaptureFixture[str]) -> None:
    """A StatefulSet already gone (a half-done earlier uninstall): nothing to scale, the finalizers still go."""
    cluster = FakeCluster([_profile("p", FINALIZER)], stops_after=0)
    cluster.scaled = True

    def request(method: str, path: str, body: Any, content_type: str) -> Mapping[str, Any] | None:
        return None if (method, path) == ("PATCH", SCALE) else cluster(method, path, body, content_type)

    assert check.main(ARGS, request=request, clock=lambda: NOW, sleep=lambda _: None) == 0
    assert cluster.profiles["p"]["metadata"]["finalizers"] == []
    assert "ok   StatefulSet rel: missing" in capsys.readouterr().out


# ---- apply-crds (the pre-upgrade hook, templates/crd-upgrade-hook.yaml) ---------------------------------------

CRD_NAME = "schedulerprofiles.kopf-scheduler.io"
CRD_MANIFEST = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": CRD_NAME}, "spec": {"group": "kopf-scheduler.io"}}  # fmt: skip


def _apply(request: Any, *extra: str) -> int:
    args = ["apply-crds", "--timeout=0", "--interval=0", f"--crd-json={json.dumps(CRD_MANIFEST)}", *extra]
    return check.main(args, request=request, sleep=lambda _: None)  # type: ignore[no-any-return]


def test_apply_crds_server_side_applies_the_file_and_waits_until_established(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls: list[tuple[str, str, Any, str]] = []
    reads = {"n": 0}

    def request(method: str, path: str, body: Any, content_type: str) -> Mapping[str, Any] | None:
        calls.append((method, path, body, content_type))
        if method == "PATCH":
            return {**body, "metadata": {**body["metadata"], "resourceVersion": "42"}}
        reads["n"] += 1
        established = reads["n"] > 2  # the new version takes a moment
        return {"status": {"conditions": [{"type": "Established", "status": str(established)}]}}

    assert _apply(request, "--timeout=5") == 0
    method, path, body, content_type = calls[0]
    assert method == "PATCH"
    assert path == f"{check.CRD_PATH.format(name=CRD_NAME)}?fieldManager=kopf-scheduler-chart&force=true"
    assert (body, content_type) == (CRD_MANIFEST, "application/apply-patch+yaml")
    assert reads["n"] == 3
    assert f"ok   CRD {CRD_NAME}: applied (resourceVersion 42), Established" in capsys.readouterr().out


def test_apply_crds_fails_when_the_crd_cannot_be_applied(capsys: pytest.CaptureFixture[str]) -> None:
    def missing(method: str, path: str, body: Any, content_type: str) -> Mapping[str, Any] | None:
        return None

    assert _apply(missing) == 1
    assert (
        "FAIL CRD schedulerprofiles.kopf-scheduler.io: missing (installed with --skip-crds?" in capsys.readouterr().out
    )

    def refused(method: str, path: str, body: Any, content_type: str) -> Mapping[str, Any] | None:
        raise urllib.error.HTTPError(path, 403, "Forbidden", Message(), None)

    assert _apply(refused) == 1
    assert "FAIL API request failed: HTTP Error 403: Forbidden" in capsys.readouterr().out
