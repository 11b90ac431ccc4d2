"""``kopf-scheduler what-if``: the offline cycle on a listed cluster, the read-only listing, and the command."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from kopf_scheduler import cli
from kopf_scheduler.kube import reader
from kopf_scheduler.kube.kubeconfig import Credentials
from kopf_scheduler.kube.reader import ReadError, api_resources, get_object, list_objects
from kopf_scheduler.state.objects import KINDS
from kopf_scheduler.whatif import (
    WATCHED_KINDS,
    OfflineScheduler,
    WhatIfError,
    format_replay,
    format_verdict,
    read_cluster,
    what_if,
)
from tests.unit.factories import make_node, make_pod

PROFILE = "p"
#: DefaultPreemption's and DynamicResources' PostFilter parts of the default profile's FitError text.
NO_CLAIMS = "no new claims to deallocate, "
NOT_HELPFUL = "Preemption is not helpful for scheduling"


def profile_pod(name: str, cpu: str, *, node: str = "", scheduler: str = PROFILE) -> dict[str, Any]:
    return make_pod(name, requests={"cpu": cpu}, node_name=node, spec={"schedulerName": scheduler})


def cluster(*, pods: list[dict[str, Any]] = ()) -> dict[str, list[dict[str, Any]]]:  # type: ignore[assignment]
    """Three nodes: n-small (2 cpu), n-mid (4 cpu), n-big (8 cpu), and ``pods``."""
    nodes = [make_node("n-small", cpu="2"), make_node("n-mid", cpu="4"), make_node("n-big", cpu="8")]
    return {"Node": nodes, "Pod": list(pods), "Namespace": [{"metadata": {"name": "default"}}]}


@pytest.mark.parametrize(
    ("pod", "others", "node", "rejected"),
    [
        pytest.param(profile_pod("w", "3"), [], "n-big", {"n-small": "NodeResourcesFit: Insufficient cpu"}, id="fits"),
        pytest.param(
            profile_pod("w", "3"),
            [profile_pod("hog", "7", node="n-big")],
            "n-mid",
            {"n-small": "NodeResourcesFit: Insufficient cpu", "n-big": "NodeResourcesFit: Insufficient cpu"},
            id="the-big-node-is-full",
        ),
        pytest.param(
            profile_pod("w", "3", node="n-mid"),
            [],
            "n-big",
            {"n-small": "NodeResourcesFit: Insufficient cpu"},
            id="a-bound-pod-is-judged-as-if-pending",
        ),
    ],
)
def test_a_pod_that_fits_goes_to_the_best_node(
    pod: dict[str, Any], others: list[dict[str, Any]], node: str, rejected: dict[str, str]
) -> None:
    [verdict] = what_if(profile=PROFILE, spec={}, cluster=cluster(pods=[*others, pod]), pod=pod)
    assert verdict.result == "Schedulable"
    assert verdict.node == node
    assert verdict.top_nodes == {node}
    assert verdict.rejections == rejected
    text = format_verdict(verdict, PROFILE)
    assert text.startswith(f"Pod default/w: would schedule on {node} (profile p)\n")
    assert "NodeResourcesFit: Insufficient cpu" in text
    if len(verdict.feasible) > 1:  # one feasible node is not scored (upstream neither)
        assert verdict.ranking()[0] == (node, max(verdict.final_scores.values()))
        assert sum(scores[node] for scores in verdict.plugin_scores.values()) == verdict.final_scores[node]
        assert f"{node} (chosen)" in text
        assert verdict.account is not None
        [winner, *_] = verdict.account["candidates"]
        assert (winner["node"], winner["total"]) == (node, verdict.final_scores[node])
    else:
        assert verdict.final_scores == {}
        assert "1 feasible node(s) of 3 evaluated.\nScore did not run" in text


def test_equal_nodes_are_reported_as_a_tie_set() -> None:
    nodes = [make_node(f"n{i}", cpu="4") for i in range(3)]
    pod = profile_pod("w", "1")
    [verdict] = what_if(profile=PROFILE, spec={}, cluster={"Node": nodes}, pod=pod)
    assert verdict.top_nodes == {"n0", "n1", "n2"}
    assert verdict.node in verdict.top_nodes
    assert "3 nodes tie for the best total, the operator picks one at random: n0, n1, n2" in format_verdict(
        verdict, PROFILE
    )


def test_a_pod_that_fits_nowhere_gets_the_fit_error_text_and_each_nodes_plugin() -> None:
    pod = profile_pod("huge", "16")
    [verdict] = what_if(profile=PROFILE, spec={}, cluster=cluster(), pod=pod)
    assert verdict.result == "Unschedulable"
    assert verdict.node is None
    assert verdict.message == (
        f"0/3 nodes are available: 3 Insufficient cpu. {NO_CLAIMS}preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}."
    )
    assert verdict.account is not None
    assert verdict.account["nodes"]["n-big"] == {
        "plugin": "NodeResourcesFit",
        "reasons": ["Insufficient cpu"],
        "preemption": "UnschedulableAndUnresolvable: preemption cannot help",
    }
    text = format_verdict(verdict, PROFILE)
    assert text.splitlines()[:2] == ["Pod default/huge: would not schedule (profile p)", verdict.message]
    assert "n-small  NodeResourcesFit  Insufficient cpu" in text


def test_preemption_is_named_not_executed() -> None:
    low = {**profile_pod("low", "7", node="n-big"), "spec": {**profile_pod("low", "7", node="n-big")["spec"]}}
    high = profile_pod("high", "6")
    high["spec"]["priority"] = 1000
    state = cluster(pods=[low])
    [verdict] = what_if(profile=PROFILE, spec={}, cluster=state, pod=high)
    assert verdict.nominated == "n-big"
    assert verdict.victims == ["default/low"]
    assert "Preemption would evict: default/low" in format_verdict(verdict, PROFILE)
    assert state["Pod"] == [low]  # the listing is not changed


def test_a_changed_profile_makes_a_pending_pod_schedulable() -> None:
    """The replay: pending pods of the profile only, each judged; a filter turned off lets the big one in."""
    pending = [profile_pod("small", "1"), profile_pod("huge", "16"), profile_pod("elsewhere", "1", scheduler="x")]
    state = cluster(pods=[*pending, profile_pod("bound", "1", node="n-mid")])
    now = what_if(profile=PROFILE, spec={}, cluster=state)
    assert [(v.pod, v.result) for v in now] == [("default/huge", "Unschedulable"), ("default/small", "Schedulable")]
    no_fit_filter = {"plugins": {"filter": {"disabled": [{"name": "NodeResourcesFit"}]}}}
    changed = what_if(profile=PROFILE, spec=no_fit_filter, cluster=state)
    assert [(v.pod, v.result) for v in changed] == [("default/huge", "Schedulable"), ("default/small", "Schedulable")]
    summary = format_replay(changed, PROFILE)
    assert summary.startswith("2 pending pod(s) of profile p: 2 would schedule now\n")


def test_a_gated_pod_is_not_tried() -> None:
    """PreEnqueue (SchedulingGates) keeps it out of the queue: the operator would not try it, nor does what-if."""
    gated = profile_pod("gated", "1")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    [verdict] = what_if(profile=PROFILE, spec={}, cluster=cluster(pods=[gated]))
    assert verdict.result == "Waiting"
    assert verdict.to_api()["message"] == "SchedulingGates: waiting for scheduling gates: [example.com/wait]"
    assert format_verdict(verdict, PROFILE) == (
        "Pod default/gated: not tried (profile p): PreEnqueue SchedulingGates: waiting for scheduling gates: "
        "[example.com/wait]"
    )


def test_no_pending_pods_and_a_broken_profile() -> None:
    assert format_replay(what_if(profile=PROFILE, spec={}, cluster=cluster()), PROFILE) == (
        "No pending pod names profile p (spec.schedulerName)."
    )
    with pytest.raises(WhatIfError, match="profile p does not build"):
        what_if(profile=PROFILE, spec={"plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}}}, cluster={})


# -- the read-only listing and the command --------------------------------------------------------------------
class FakeAPI:
    """The API server's collections and objects; lists are served two items a page; records every request."""

    def __init__(self, objects: Mapping[str, Any], *, refuse: str = "") -> None:
        self.objects = objects
        self.refuse = refuse
        self.requests: list[str] = []

    def __call__(self, path: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        self.requests.append(path)
        url = urlsplit(path)
        if self.refuse and url.path == self.refuse:
            return 403, json.dumps({"kind": "Status", "message": "forbidden: not for you"}).encode()
        found = self.objects.get(url.path)
        if found is None:
            return 404, json.dumps({"kind": "Status", "message": "not found"}).encode()
        if not isinstance(found, list):
            return 200, json.dumps(found).encode()
        query = parse_qs(url.query)
        start = int(query.get("continue", ["0"])[0])
        limit = int(query["limit"][0])
        page: dict[str, Any] = {"items": found[start : start + limit], "metadata": {}}
        if start + limit < len(found):
            page["metadata"]["continue"] = str(start + limit)
        return 200, json.dumps(page).encode()


def test_lists_are_read_page_by_page_and_missing_apis_are_empty() -> None:
    api = FakeAPI({"/api/v1/nodes": [{"n": i} for i in range(5)]})
    assert list_objects(api, "/api/v1/nodes", limit=2) == [{"n": i} for i in range(5)]
    assert len(api.requests) == 3
    assert list_objects(api, "/apis/resource.k8s.io/v1/deviceclasses") is None
    assert get_object(api, "/api/v1/namespaces/default/pods/gone") is None
    with pytest.raises(ReadError, match="list /api/v1/pods: HTTP 403: forbidden: not for you"):
        list_objects(FakeAPI({}, refuse="/api/v1/pods"), "/api/v1/pods")


PROFILE_PATH = "/apis/kopf-scheduler.io/v1alpha1/schedulerprofiles/p"


def fake_cluster_api(pods: list[dict[str, Any]], profile_spec: dict[str, Any] | None = None) -> FakeAPI:
    state = cluster(pods=pods)
    objects: dict[str, Any] = {watched.path: list(state.get(watched.kind, [])) for watched in WATCHED_KINDS}
    objects[PROFILE_PATH] = {"kind": "SchedulerProfile", "metadata": {"name": "p"}, "spec": profile_spec or {}}
    for pod in pods:
        objects[f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}"] = pod
    return FakeAPI(objects)


@pytest.fixture
def use_api(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(api: FakeAPI) -> FakeAPI:
        credentials = Credentials(server="https://api.example", namespace="ctx")
        monkeypatch.setattr("kopf_scheduler.kube.kubeconfig.load_credentials", lambda **_: credentials)
        monkeypatch.setattr("kopf_scheduler.kube.remote_explain.APIServer", lambda _credentials: api)
        return api

    return install


def test_the_command_reads_the_profile_by_name_and_the_pod_from_the_cluster(
    use_api: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    api = use_api(fake_cluster_api([profile_pod("w", "3")]))
    assert cli.main(["what-if", "--profile", "p", "--pod", "default/w", "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["profile"] == "p"
    [pod] = answer["pods"]
    assert (pod["pod"], pod["result"], pod["node"], pod["topNodes"]) == ("default/w", "Schedulable", "n-big", ["n-big"])
    assert PROFILE_PATH in api.requests
    assert all(not urlsplit(path).path.endswith(("/binding", "/status", "/eviction")) for path in api.requests)
    required = {w.path for w in WATCHED_KINDS if not w.optional}
    assert {urlsplit(path).path for path in api.requests} >= required


def test_the_command_takes_profile_and_pod_files_and_replays_without_pod(
    use_api: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    use_api(fake_cluster_api([profile_pod("huge", "16", scheduler="relaxed")]))
    manifest = {
        "apiVersion": "kopf-scheduler.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": "relaxed"},
        "spec": {"plugins": {"filter": {"disabled": [{"name": "NodeResourcesFit"}]}}},
    }
    profile_file = tmp_path / "profile.yaml"
    profile_file.write_text(yaml.safe_dump(manifest))
    assert cli.main(["what-if", "--profile", str(profile_file)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 pending pod(s) of profile relaxed: 1 would schedule now\n")
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(profile_pod("new", "16")))
    assert cli.main(["what-if", "--profile", "p", "--pod", str(pod_file)]) == 0
    assert capsys.readouterr().out.startswith(
        "Pod default/new: would not schedule (profile p)\n0/3 nodes are available"
    )


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--profile", "nope"], "there is no SchedulerProfile 'nope' in the cluster, nor a file of that name"),
        (["--profile", "p", "--pod", "default/gone"], "there is no pod default/gone in the cluster"),
        (["--profile", "p", "--pod", "no-slash"], "--pod: expected NAMESPACE/NAME or a Pod manifest file"),
    ],
)
def test_the_command_says_what_is_missing(
    use_api: Any, capsys: pytest.CaptureFixture[str], argv: list[str], error: str
) -> None:
    use_api(fake_cluster_api([]))
    assert cli.main(["what-if", *argv]) == 1
    assert error in capsys.readouterr().err


def test_a_refused_list_names_the_resource(use_api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    api = fake_cluster_api([])
    api.refuse = "/apis/policy/v1/poddisruptionbudgets"
    use_api(api)
    assert cli.main(["what-if", "--profile", "p"]) == 1
    assert "list /apis/policy/v1/poddisruptionbudgets: HTTP 403" in capsys.readouterr().err


WORKLOAD_API = "/apis/scheduling.k8s.io/v1alpha2"


def test_what_if_skips_the_workload_api_where_the_cluster_does_not_serve_it(
    use_api: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """One discovery GET of scheduling.k8s.io/v1alpha2 (404: not served), and no LIST of its kinds."""
    api = use_api(fake_cluster_api([profile_pod("w", "3")]))
    assert cli.main(["what-if", "--profile", "p", "--pod", "default/w", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["pods"][0]["node"] == "n-big"
    paths = [urlsplit(path).path for path in api.requests]
    assert paths.count(WORKLOAD_API) == 1
    assert not [path for path in paths if path.startswith(WORKLOAD_API + "/")]


def test_what_if_lists_the_workload_api_where_the_cluster_serves_it() -> None:
    """Served (discovery names the resource): listed and fed; a served group without one of them skips only it."""
    podgroup = {"metadata": {"name": "g", "namespace": "default", "uid": "g1", "resourceVersion": "1"}}
    api = FakeAPI(
        {
            WORKLOAD_API: {
                "kind": "APIResourceList",
                "resources": [{"name": "podgroups"}, {"name": "podgroups/status"}],
            },
            f"{WORKLOAD_API}/podgroups": [podgroup],
            f"{WORKLOAD_API}/workloads": [{"metadata": {"name": "never-listed"}}],
        }
    )
    found = read_cluster(lambda path: list_objects(api, path), lambda prefix: api_resources(api, prefix))
    assert (found["PodGroup"], found["Workload"]) == ([podgroup], [])
    assert f"{WORKLOAD_API}/workloads" not in {urlsplit(path).path for path in api.requests}
    model = OfflineScheduler({})
    model.feed("PodGroup", podgroup)
    assert model.app.cache.objects.get("PodGroup", "g", "default") == podgroup


def test_discovery_reads_the_resource_names_and_none_for_an_unserved_api() -> None:
    api = FakeAPI({WORKLOAD_API: {"resources": [{"name": "workloads"}, {"name": "podgroups"}]}})
    assert api_resources(api, WORKLOAD_API) == {"workloads", "podgroups"}
    assert api_resources(api, "/apis/nope.example/v1") is None
    with pytest.raises(ReadError, match="HTTP 403"):
        api_resources(FakeAPI({}, refuse=WORKLOAD_API), WORKLOAD_API)


def test_reader_module_has_no_writing_verb() -> None:
    source = Path(reader.__file__).read_text()
    assert all(verb not in source for verb in ('"POST"', '"PUT"', '"PATCH"', '"DELETE"'))


def test_what_if_feeds_every_kind_the_operator_watches_and_no_other() -> None:
    """Every row of ``watched.py`` goes into the model through the app's watch feed; an unwatched kind is refused."""
    model = OfflineScheduler({})
    for watched in WATCHED_KINDS:
        meta = {"name": "x", "uid": f"u-{watched.kind}", "resourceVersion": "1"}
        model.feed(watched.kind, {"metadata": {**meta, "namespace": "default"} if watched.namespaced else meta})
    assert model.app.cache.node("x") is not None
    assert model.app.cache.namespace_labels == {"x": {}}
    assert {kind for kind in KINDS if model.app.cache.objects.count(kind)} == set(KINDS)
    with pytest.raises(ValueError, match="does not watch Secret objects"):
        model.feed("Secret", {"metadata": {"name": "s"}})
