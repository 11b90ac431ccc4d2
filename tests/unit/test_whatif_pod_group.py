"""``kopf-scheduler what-if`` for a whole PodGroup: GangScheduling's PreEnqueue, then the pod-group cycle's algorithm
on the listed cluster, and what the operator's submit would make of it (upstream's messages), nothing bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from kopf_scheduler import cli
from kopf_scheduler.whatif import WATCHED_KINDS, GroupVerdict, WhatIfError, format_group_verdict, what_if_pod_group
from tests.unit.factories import make_node, make_pod
from tests.unit.test_whatif import PROFILE_PATH, FakeAPI, use_api  # noqa: F401 - the fixture

GANG = {"plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}


def not_whole(pod: str) -> str:
    """A placed member of a gang not whole: the group's error, then its Permit's Wait (upstream RunPermitPlugins:
    GangScheduling's reason and the framework's, without the pod's name in v1.36.3)."""
    return (
        "pod group is unschedulable, waiting for minCount pods from a gang to be scheduled, "
        "one or more plugins asked to wait and no plugin rejected pod"
    )


def pod_group(name: str = "g", min_count: int = 3) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"pg-{name}", "resourceVersion": "1"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def member(name: str, cpu: str = "1", *, group: str = "g", node: str = "", scheduler: str = "other") -> dict[str, Any]:
    spec = {"schedulingGroup": {"podGroupName": group}, "schedulerName": scheduler}
    return make_pod(name, uid=name, requests={"cpu": cpu}, node_name=node, spec=spec)


def cluster(*nodes_cpu: str, pods: list[dict[str, Any]] = (), groups: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    nodes = [make_node(f"n{i}", cpu=cpu) for i, cpu in enumerate(nodes_cpu)]
    return {
        "Node": nodes,
        "Pod": list(pods),
        "PodGroup": list(groups),
        "Namespace": [{"metadata": {"name": "default"}}],
    }


def decide(state: dict[str, Any], *, group: dict[str, Any] | None = None, pods: Any = None) -> GroupVerdict:
    return what_if_pod_group(profile="p", spec=GANG, cluster=state, pod_group=group or pod_group(), pods=pods)


def test_a_gang_that_fits_is_placed_whole_and_nothing_is_bound() -> None:
    state = cluster("2", "2", pods=[member(f"m{i}") for i in range(3)], groups=[pod_group()])
    verdict = decide(state)
    assert verdict.result == "Schedulable"
    assert set(verdict.nodes) == {"default/m0", "default/m1", "default/m2"}
    assert all(node in ("n0", "n1") for node in verdict.nodes.values())
    assert sorted(verdict.nodes.values()).count("n0") <= 2  # two CPUs a node: the cycle saw its own placements
    assert verdict.messages == {}
    assert format_group_verdict(verdict, "p").startswith(
        "PodGroup default/g: would schedule all 3 pending pod(s) in one cycle (profile p)\n"
    )
    assert verdict.to_api()["pods"][0]["pod"] == "default/m0"


def test_a_gang_where_one_member_fits_nowhere_places_none_with_upstreams_messages() -> None:
    pods = [member("m0"), member("m1"), member("m2", cpu="3")]
    verdict = decide(cluster("2", "2", pods=pods, groups=[pod_group()]))
    # The placement algorithm's verdict (one placement of every node), then workload-aware preemption's answer
    # (nothing of lower priority to evict).
    assert (verdict.result, verdict.message) == (
        "Unschedulable",
        "0/1 placements are available, first placement status: pod group is unschedulable, "
        "No preemption victims found for incoming preemptor",
    )
    assert verdict.victims == []
    assert verdict.nodes == dict.fromkeys(["default/m0", "default/m1", "default/m2"])
    assert verdict.messages["default/m0"] == not_whole("m0")
    assert verdict.messages["default/m1"] == not_whole("m1")
    assert verdict.messages["default/m2"].startswith("0/2 nodes are available: 2 Insufficient cpu.")
    text = format_group_verdict(verdict, "p")
    assert text.startswith("PodGroup default/g: would not schedule (profile p): 0/1 placements are available, ")
    assert f"default/m0  {not_whole('m0')}" in text


def test_preemption_for_the_group_is_named_and_not_executed() -> None:
    """A node full of a lower-priority pod: the group of priority 10 would preempt it (workload-aware preemption),
    so it waits on preemption; what-if names the victim, and the victim stays in the model."""
    victim = make_pod("v", uid="v", requests={"cpu": "2"}, node_name="n0", spec={"priority": 0})
    group = pod_group(min_count=2)
    group["spec"]["priority"] = 10
    state = cluster("2", pods=[victim, member("m0"), member("m1")], groups=[group])
    verdict = decide(state, group=group)
    assert verdict.result == "Unschedulable"
    assert verdict.victims == ["default/v"]
    assert verdict.to_api()["victims"] == ["default/v"]
    assert format_group_verdict(verdict, "p").endswith("Preemption for the group would evict: default/v")
    assert decide(state, group=group).victims == ["default/v"]  # nobody was evicted: the same answer again


def test_a_gang_short_of_its_min_count_waits_at_pre_enqueue() -> None:
    verdict = decide(cluster("8", pods=[member("m0"), member("m1")], groups=[pod_group()]))
    assert verdict.result == "Waiting"
    assert verdict.message == ("GangScheduling: waiting for minCount pods from a gang to appear in scheduling queue")
    assert format_group_verdict(verdict, "p").startswith("PodGroup default/g: not tried (profile p): PreEnqueue ")


def test_bound_members_count_for_the_quorum_and_given_pods_replace_the_clusters() -> None:
    """Two members bound already, a third pending: the third completes the gang. From a file, the group and a
    bigger third member replace the cluster's copies: no room for it, so the gang is not whole."""
    bound = [member("m0", node="n0"), member("m1", node="n0")]
    state = cluster("2", "1", pods=[*bound, member("m2")], groups=[pod_group()])
    verdict = decide(state)
    assert (verdict.result, verdict.nodes) == ("Schedulable", {"default/m2": "n1"})
    bigger = decide(state, pods=[member("m2", cpu="2")])
    assert bigger.result == "Unschedulable"
    assert bigger.messages["default/m2"].startswith("0/2 nodes are available: 2 Insufficient cpu.")
    # A group file whose minCount is one: the lone pending member alone completes it, wherever it fits.
    assert decide(state, group=pod_group(min_count=1)).result == "Schedulable"
    # minCount two of three pending, one too big: the group is placed without it, which says why it is not.
    three = cluster("4", pods=[member("m0"), member("m1"), member("m2", cpu="8")], groups=[pod_group()])
    partial = decide(three, group=pod_group(min_count=2))
    assert partial.result == "Schedulable"
    assert (partial.nodes["default/m0"], partial.nodes["default/m1"], partial.nodes["default/m2"]) == ("n0", "n0", None)
    assert partial.messages["default/m2"].startswith("0/1 nodes are available: 1 Insufficient cpu.")
    assert format_group_verdict(partial, "p").startswith(
        "PodGroup default/g: would schedule 2 of its 3 pending pod(s) in one cycle (profile p)\n"
    )


def test_a_group_with_no_pending_member_is_refused() -> None:
    with pytest.raises(WhatIfError, match="PodGroup default/g has no pending pod of profile p"):
        decide(cluster("2", pods=[member("m0", node="n0")], groups=[pod_group(min_count=1)]))


WORKLOAD_API = "/apis/scheduling.k8s.io/v1alpha2"


def served_api(state: dict[str, Any]) -> FakeAPI:
    """The cluster ``state`` served, the workload API included, with profile ``p`` (GangScheduling)."""
    objects: dict[str, Any] = {watched.path: list(state.get(watched.kind, [])) for watched in WATCHED_KINDS}
    objects[WORKLOAD_API] = {"resources": [{"name": "podgroups"}, {"name": "workloads"}]}
    objects[PROFILE_PATH] = {"kind": "SchedulerProfile", "metadata": {"name": "p"}, "spec": GANG}
    for group in state.get("PodGroup", []):
        objects[f"{WORKLOAD_API}/namespaces/default/podgroups/{group['metadata']['name']}"] = group
    return FakeAPI(objects)


def test_the_command_judges_a_pod_group_of_the_cluster_or_of_a_file(
    use_api: Any,  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = cluster("2", "2", pods=[member(f"m{i}") for i in range(3)], groups=[pod_group()])
    api = use_api(served_api(state))
    assert cli.main(["what-if", "--profile", "p", "--pod-group", "default/g", "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["profile"], answer["podGroup"]["podGroup"], answer["podGroup"]["result"]) == (
        "p",
        "default/g",
        "Schedulable",
    )
    assert [p["pod"] for p in answer["podGroup"]["pods"]] == ["default/m0", "default/m1", "default/m2"]
    assert all(not urlsplit(path).path.endswith(("/binding", "/status")) for path in api.requests)
    # A file: a bigger gang of the same name (minCount 4, a new fourth pod) in the context's namespace.
    manifests = [pod_group(min_count=4), member("m3")]
    for manifest in manifests:
        manifest["metadata"].pop("namespace", None)
    group_file = tmp_path / "gang.yaml"
    group_file.write_text(yaml.safe_dump_all(manifests))
    use_api(served_api({**state, "Namespace": [{"metadata": {"name": "ctx"}}]}))
    assert cli.main(["what-if", "--profile", "p", "--pod-group", str(group_file)]) == 0
    assert capsys.readouterr().out.startswith(
        "PodGroup ctx/g: not tried (profile p): PreEnqueue GangScheduling: waiting for minCount pods"
    )


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--pod-group", "default/gone"], "there is no PodGroup default/gone in the cluster"),
        (["--pod-group", "no-slash"], "--pod-group: expected NAMESPACE/NAME or a manifest file"),
        (["--pod-group", "default/g", "--pod", "default/m0"], None),
    ],
)
def test_the_pod_group_command_says_what_is_wrong(
    use_api: Any,  # noqa: F811 - the fixture
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    error: str | None,
) -> None:
    use_api(served_api(cluster("2")))
    if error is None:  # --pod and --pod-group exclude each other
        with pytest.raises(SystemExit):
            cli.main(["what-if", "--profile", "p", *argv])
        assert "not allowed with argument" in capsys.readouterr().err
        return
    assert cli.main(["what-if", "--profile", "p", *argv]) == 1
    assert error in capsys.readouterr().err
