"""HTTP extenders: the pure wire conversion, upstream's validation, and the cycle with a fake transport."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kopf_scheduler.api.args import NodeResourcesFitArgs
from kopf_scheduler.api.profile import Extender as ExtenderSpec
from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.framework.builder import ProfileError, resolve_profile
from kopf_scheduler.framework.extender import (
    Extender,
    ExtenderConfig,
    ExtenderError,
    PreemptionVictims,
    build_extenders,
    extender_args,
    extenders_binding,
    find_nodes_that_pass_extenders,
    parse_filter_result,
    parse_go_duration,
    parse_host_priorities,
    parse_preemption_result,
    pod_uses_resources,
    preemption_args,
    prioritize_with_extenders,
    process_preemption_with_extenders,
    scaled_score,
)
from kopf_scheduler.framework.status import Code
from kopf_scheduler.plugins.registry import default_registry
from kopf_scheduler.settings import RunSettings
from tests.unit.app_harness import FakeClient, FakeClock, pending
from tests.unit.factories import make_node, make_pod, pod_info

URL = "http://ext:8888/scheduler"

Handler = Callable[[str, Mapping[str, Any]], Any]


class FakeTransport:
    """Answers each call with ``handlers[(url_prefix, verb)](verb, body)``; records every call."""

    def __init__(self, handlers: dict[tuple[str, str], Handler] | None = None) -> None:
        self.handlers = handlers or {}
        self.calls: list[tuple[str, str, Mapping[str, Any]]] = []
        self.prepared: list[ExtenderConfig] = []

    def prepare(self, config: ExtenderConfig) -> None:
        self.prepared.append(config)

    async def post(self, config: ExtenderConfig, verb: str, body: Mapping[str, Any]) -> Any:
        self.calls.append((config.url_prefix, verb, body))
        await asyncio.sleep(0)
        handler = self.handlers.get((config.url_prefix, verb))
        if handler is None:
            raise ExtenderError(f'Post "{config.url(verb)}": dial tcp: connect: connection refused')
        return handler(verb, body)


def spec(**fields: Any) -> ExtenderSpec:
    return ExtenderSpec.model_validate({"urlPrefix": URL, **fields})


def extender(transport: FakeTransport, errors: list[tuple[str, str]] | None = None, **fields: Any) -> Extender:
    sink = errors if errors is not None else []
    return build_extenders([spec(**fields)], transport, on_error=lambda name, verb: sink.append((name, verb)))[0]


NODES = [
    ("n1", {"metadata": {"name": "n1"}}),
    ("n2", {"metadata": {"name": "n2"}}),
    ("n3", {"metadata": {"name": "n3"}}),
]


# -- the pure wire conversion ---------------------------------------------------------------------------------------
def test_extender_args_send_nodes_or_names_with_go_field_names() -> None:
    pod = make_pod("p")
    full = extender_args(pod, NODES[:1], names_only=False)
    assert full == {"Pod": pod, "Nodes": {"metadata": {}, "items": [{"metadata": {"name": "n1"}}]}, "NodeNames": None}
    assert extender_args(pod, NODES, names_only=True) == {"Pod": pod, "Nodes": None, "NodeNames": ["n1", "n2", "n3"]}


def test_filter_result_keys_match_case_insensitively_as_go_decodes_them() -> None:
    result = {"nodenames": ["n2"], "failedNodes": {"n1": "busy"}, "FAILEDANDUNRESOLVABLENODES": {"n3": "never"}}
    verdict = parse_filter_result(result, ["n1", "n2", "n3"], names_only=True, name=URL)
    assert verdict.passed == ("n2",)
    assert verdict.failed == {"n1": "busy"}
    assert verdict.unresolvable == {"n3": "never"}


def test_filter_result_error_and_unknown_node_fail_with_upstream_texts() -> None:
    with pytest.raises(ExtenderError, match=r"^boom$"):
        parse_filter_result({"Error": "boom"}, ["n1"], names_only=True, name=URL)
    with pytest.raises(ExtenderError) as caught:
        parse_filter_result({"NodeNames": ["nX"]}, ["n1"], names_only=True, name=URL)
    assert (
        str(caught.value) == f'extender "{URL}" claims a filtered node "nX" which is not found in the input node list'
    )


def test_filter_result_with_node_objects_keeps_only_nodes_that_were_sent() -> None:
    result = {"Nodes": {"items": [{"metadata": {"name": "n2"}}, {"metadata": {"name": "stranger"}}]}}
    assert parse_filter_result(result, ["n1", "n2"], names_only=False, name=URL).passed == ("n2",)
    assert parse_filter_result({}, ["n1"], names_only=False, name=URL).passed == ()


def test_host_priorities_and_scaling() -> None:
    assert parse_host_priorities([{"Host": "n1", "Score": 7}, {"host": "n2", "score": 0}]) == [("n1", 7), ("n2", 0)]
    with pytest.raises(ExtenderError):
        parse_host_priorities({"Host": "n1"})
    assert scaled_score(7, 3) == 210  # score × weight × (100 / 10)


def test_interest_by_managed_resources_in_requests_or_limits_of_any_container() -> None:
    managed = frozenset({"example.com/gpu"})
    assert not pod_uses_resources(make_pod(requests={"cpu": "1"}), managed)
    assert pod_uses_resources(make_pod(requests={"example.com/gpu": 1}), managed)
    init = make_pod(spec={"initContainers": [{"name": "i", "resources": {"limits": {"example.com/gpu": 1}}}]})
    assert pod_uses_resources(init, managed)
    transport = FakeTransport()
    assert extender(transport).is_interested(pod_info(make_pod()))  # no managed resources: every pod
    gpu = extender(transport, managedResources=[{"name": "example.com/gpu"}])
    assert not gpu.is_interested(pod_info(make_pod()))


@pytest.mark.parametrize(
    ("text", "seconds"), [("5s", 5.0), ("250ms", 0.25), ("1m30s", 90.0), ("0", 0.0), ("1.5h", 5400.0)]
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5", 'time: missing unit in duration "5"'),
        ("5x", 'time: unknown unit "x" in duration "5x"'),
        ("soon", 'time: invalid duration "soon"'),
    ],
)
def test_bad_go_durations(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^time: ") as caught:
        parse_go_duration(text)
    assert str(caught.value) == message


def test_timeout_defaults_to_five_seconds_and_ignorable_extenders_go_last() -> None:
    transport = FakeTransport()
    specs = [spec(urlPrefix="http://a", ignorable=True), spec(urlPrefix="http://b", httpTimeout="250ms")]
    built = build_extenders(specs, transport)
    assert [e.name for e in built] == ["http://b", "http://a"]
    assert [c.timeout_seconds for c in transport.prepared] == [5.0, 0.25]
    assert built[0].config.url("filter") == "http://b/filter"
    assert build_extenders([spec(urlPrefix="http://c/")], transport)[0].config.url("bind") == "http://c/bind"


# -- the steps --------------------------------------------------------------------------------------------------------
def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_filter_extenders_run_in_order_on_what_is_left_and_unresolvable_wins() -> None:
    first = "http://first"
    transport = FakeTransport(
        {
            (first, "filter"): lambda _, body: {
                "NodeNames": ["n1", "n2"],
                "FailedNodes": {"n3": "soft"},
                "FailedAndUnresolvableNodes": {"n3": "hard"},
            },
            (URL, "filter"): lambda _, body: {"NodeNames": ["n2"], "FailedNodes": {"n1": "no gpu"}},
        }
    )
    extenders = build_extenders(
        [
            spec(urlPrefix=first, filterVerb="filter", nodeCacheCapable=True),
            spec(filterVerb="filter", nodeCacheCapable=True),
        ],
        transport,
    )
    outcome = run(find_nodes_that_pass_extenders(extenders, pod_info(make_pod()), NODES))
    assert outcome.passed == ["n2"]
    assert [(n, s.code, s.message, s.plugin) for n, s in outcome.rejected] == [
        ("n3", Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "hard", first),
        ("n1", Code.UNSCHEDULABLE, "no gpu", URL),
    ]
    assert transport.calls[1][2]["NodeNames"] == ["n1", "n2"]  # the second saw only what the first let through


def test_filter_errors_fail_unless_ignorable_and_are_counted() -> None:
    errors: list[tuple[str, str]] = []
    pod = pod_info(make_pod())
    strict = extender(FakeTransport(), errors, filterVerb="filter")
    with pytest.raises(ExtenderError, match="connection refused"):
        run(find_nodes_that_pass_extenders([strict], pod, NODES))
    lenient = extender(FakeTransport(), errors, filterVerb="filter", ignorable=True)
    assert run(find_nodes_that_pass_extenders([lenient], pod, NODES)).passed == ["n1", "n2", "n3"]
    assert errors == [(URL, "filter"), (URL, "filter")]


def test_uninterested_and_non_filter_extenders_are_not_called() -> None:
    transport = FakeTransport()
    gpu = extender(transport, filterVerb="filter", managedResources=[{"name": "example.com/gpu"}])
    scorer = extender(transport, prioritizeVerb="prio", weight=1)
    assert run(find_nodes_that_pass_extenders([gpu, scorer], pod_info(make_pod()), NODES)).passed == ["n1", "n2", "n3"]
    assert transport.calls == []


def test_prioritize_extenders_run_in_parallel_and_a_failing_one_gives_nothing() -> None:
    started: list[str] = []

    async def slow(name: str) -> None:
        started.append(name)
        await asyncio.sleep(0.01)

    class Concurrent(FakeTransport):
        async def post(self, config: ExtenderConfig, verb: str, body: Mapping[str, Any]) -> Any:
            await slow(config.url_prefix)
            assert len(started) == 3  # every call started before any answered
            return await super().post(config, verb, body)

    transport = Concurrent({("http://a", "prio"): lambda *_: [{"Host": "n1", "Score": 10}, {"Host": "n2", "Score": 5}]})
    errors: list[tuple[str, str]] = []
    extenders = build_extenders(
        [
            spec(urlPrefix="http://a", prioritizeVerb="prio", weight=2),
            spec(urlPrefix="http://down", prioritizeVerb="prio", weight=5),
            spec(urlPrefix="http://nothing", filterVerb="f"),
        ],
        transport,
        on_error=lambda name, verb: errors.append((name, verb)),
    )

    async def go() -> dict[str, dict[str, int]]:
        # A non-prioritizer is not called: upstream gives every node 0 from it, which adds nothing.
        return await prioritize_with_extenders(extenders, pod_info(make_pod()), NODES)

    started.append("not-a-call")  # the non-prioritizer does not post
    assert run(go()) == {"http://a": {"n1": 200, "n2": 100}, "http://nothing": {"n1": 0, "n2": 0, "n3": 0}}
    assert errors == [("http://down", "prioritize")]


def test_binding_first_interested_binder_and_ignorable_passes_the_turn() -> None:
    transport = FakeTransport({(URL, "bind"): lambda _, body: {"Error": ""}})
    pod = pod_info(make_pod("p", namespace="ns"))
    binder = extender(transport, bindVerb="bind")
    assert run(extenders_binding([binder], pod, "n1")).is_success
    assert transport.calls[-1][2] == {"PodName": "p", "PodNamespace": "ns", "PodUID": pod.uid, "Node": "n1"}
    down = build_extenders([spec(urlPrefix="http://down", bindVerb="bind", ignorable=True)], transport)
    assert run(extenders_binding(down, pod, "n1")) is None  # the Bind plugins bind
    refusing = FakeTransport({(URL, "bind"): lambda *_: {"Error": "no room"}})
    status = run(extenders_binding([extender(refusing, bindVerb="bind")], pod, "n1"))
    assert status.code is Code.ERROR
    assert status.message == "no room"
    gpu_binder = extender(transport, bindVerb="bind", managedResources=[{"name": "example.com/gpu"}])
    assert run(extenders_binding([gpu_binder], pod, "n1")) is None


# -- validation -------------------------------------------------------------------------------------------------------
def resolve(extenders: list[dict[str, Any]], **more: Any) -> Any:
    model = SchedulerProfileSpec.model_validate({"extenders": extenders, **more})
    return resolve_profile("sp", model, default_registry())


def test_validation_messages_are_upstreams() -> None:
    with pytest.raises(ProfileError) as caught:
        resolve(
            [
                {"urlPrefix": "http://a", "prioritizeVerb": "prio", "bindVerb": "bind"},
                {
                    "urlPrefix": "http://b",
                    "bindVerb": "bind",
                    "httpTimeout": "5",
                    "managedResources": [{"name": "cpu"}],
                },
                {
                    "urlPrefix": "http://c",
                    "managedResources": [{"name": "example.com/gpu"}, {"name": "example.com/gpu"}],
                },
            ]
        )
    assert [str(e) for e in caught.value.errors] == [
        "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it",
        'extenders[1].httpTimeout: Invalid value: "5": time: missing unit in duration "5"',
        'extenders[1].managedResources[0].name: Invalid value: "cpu": is an invalid extended resource name',
        'extenders[2].managedResources[1].name: Invalid value: "example.com/gpu": '
        "duplicate extender managed resource name",
        'extenders: Invalid value: "found 2 extenders implementing bind": only one extender can implement bind',
    ]


def test_managed_resource_names_must_be_qualified_names() -> None:
    with pytest.raises(ProfileError) as caught:
        resolve([{"urlPrefix": "http://a", "managedResources": [{"name": "example.com/bad name"}]}])
    assert (
        'extenders[0].managedResources[0].name: Invalid value: "example.com/bad name": name part must consist'
        in str(caught.value)
    )


def test_ignored_by_scheduler_replaces_the_fit_plugins_ignored_resources() -> None:
    resolved = resolve(
        [{"urlPrefix": "http://a", "managedResources": [{"name": "example.com/gpu", "ignoredByScheduler": True}]}],
        pluginConfig=[{"name": "NodeResourcesFit", "args": {"ignoredResources": ["example.com/other"]}}],
    )
    args = resolved.plugin_args["NodeResourcesFit"]
    assert isinstance(args, NodeResourcesFitArgs)
    assert args.ignored_resources == ["example.com/gpu"]


# -- the cycle, through the app ---------------------------------------------------------------------------------------
def new_app(transport: FakeTransport | None, client: FakeClient) -> SchedulerApp:
    return SchedulerApp(
        settings=RunSettings(),
        client=client,
        rng=random.Random(1),
        hostname="test",
        clock=FakeClock(),
        extender_transport=transport,
    )


def drive(app: SchedulerApp, profile: str = "sp") -> None:
    async def go() -> None:
        runtime = app.profiles[profile]
        while (qpod := runtime.queue.pop_nowait()) is not None:
            cycle = app.cycles.schedule_one(runtime, qpod)
            if cycle is not None:
                await cycle
        await app.drain()

    asyncio.run(go())


def cluster(
    transport: FakeTransport | None, extenders: list[dict[str, Any]], nodes: int = 3
) -> tuple[SchedulerApp, FakeClient]:
    client = FakeClient()
    app = new_app(transport, client)
    for i in range(1, nodes + 1):
        app.on_node_event(None, make_node(f"n{i}"))
    outcome = app.apply_profile(name="sp", spec={"extenders": extenders}, generation=1)
    assert outcome.ready, outcome.message
    return app, client


def names_of(body: Mapping[str, Any]) -> list[str]:
    return (
        body["NodeNames"] if body["NodeNames"] is not None else [n["metadata"]["name"] for n in body["Nodes"]["items"]]
    )


def test_filter_prioritize_and_bind_extenders_decide_the_pod() -> None:
    transport = FakeTransport(
        {
            # Not nodeCacheCapable: the answer carries Node objects (NodeNames would be ignored, as upstream).
            (URL, "filter"): lambda _, body: {
                "Nodes": {"items": [n for n in body["Nodes"]["items"] if n["metadata"]["name"] != "n3"]},
                "NodeNames": ["n3"],
                "FailedNodes": {"n3": "no"},
            },
            (URL, "prioritize"): lambda _, body: [{"Host": n, "Score": 10 if n == "n2" else 0} for n in names_of(body)],
            (URL, "bind"): lambda _, body: {},
        }
    )
    ext = {"urlPrefix": URL, "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 5, "bindVerb": "bind"}
    app, client = cluster(transport, [ext])
    app.on_pod_event("ADDED", pending("p"))
    drive(app)
    assert [verb for _, verb, _ in transport.calls] == ["filter", "prioritize", "bind"]
    assert transport.calls[0][2]["Nodes"]["items"][0]["kind"] == "Node"  # not nodeCacheCapable: full Nodes
    assert transport.calls[2][2]["Node"] == "n2"
    assert client.bindings == []  # the extender bound it, not DefaultBinder
    scheduled = [e for e in client.events if e["reason"] == "Scheduled"]
    assert scheduled
    assert "to n2" in scheduled[0]["note"]


def test_all_nodes_rejected_by_an_extender_is_a_fit_error_explained_per_node() -> None:
    transport = FakeTransport(
        {(URL, "filter"): lambda _, body: {"NodeNames": [], "FailedNodes": {n: "no gpu here" for n in names_of(body)}}}
    )
    app, client = cluster(transport, [{"urlPrefix": URL, "filterVerb": "filter", "nodeCacheCapable": True}])
    app.on_pod_event("ADDED", pending("p"))
    drive(app)
    failed = [e for e in client.events if e["reason"] == "FailedScheduling"]
    # (a PostFilter such as DefaultPreemption, where enabled, appends its "preemption: ..." part)
    assert failed[0]["note"].startswith("0/3 nodes are available: 3 no gpu here.")
    account = app.explanations.get("default/p")
    assert account is not None
    verdict = account["nodes"]["n1"]
    assert (verdict["plugin"], verdict["reasons"]) == (URL, ["no gpu here"])
    assert verdict["preemption"] == "not a candidate: no lower-priority pods"  # U: preemption looked at it
    qpod = app.profiles["sp"].queue.get(next(iter(app.unassigned)))
    assert qpod is not None
    assert {"Extender", URL} <= qpod.unschedulable_plugins  # upstream's ExtenderName: any event requeues it


def test_unreachable_extender_fails_the_cycle_unless_ignorable() -> None:
    app, client = cluster(FakeTransport(), [{"urlPrefix": URL, "filterVerb": "filter"}])
    app.on_pod_event("ADDED", pending("p"))
    drive(app)
    failed = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert failed
    assert f'Post "{URL}/filter"' in failed[0]["note"]
    assert client.bindings == []
    assert (
        app.metrics.registry.get_sample_value(
            "kopf_scheduler_extender_errors_total", {"extender": URL, "verb": "filter"}
        )
        == 1.0
    )

    app, client = cluster(
        FakeTransport(), [{"urlPrefix": URL, "filterVerb": "filter", "bindVerb": "b", "ignorable": True}]
    )
    app.on_pod_event("ADDED", pending("p"))
    drive(app)
    assert len(client.bindings) == 1  # filter and bind errors ignored: DefaultBinder bound it


def test_an_extender_error_on_the_nominated_node_falls_back_to_the_full_search() -> None:
    # Upstream findNodesThatFitPod: an error of evaluateNominatedNode is logged and every node is searched; the
    # extender is asked again there (and answers this time).
    answered: list[list[str]] = []

    def flaky(_: str, body: Mapping[str, Any]) -> Any:
        if not answered:
            answered.append([])
            raise ExtenderError(f'Post "{URL}/filter": context deadline exceeded')
        answered.append(names_of(body))
        return {"NodeNames": [n for n in names_of(body) if n != "n1"], "FailedNodes": {}}

    transport = FakeTransport({(URL, "filter"): flaky})
    app, client = cluster(transport, [{"urlPrefix": URL, "filterVerb": "filter", "nodeCacheCapable": True}])
    pod = pending("p")
    pod["status"]["nominatedNodeName"] = "n2"
    app.on_pod_event("ADDED", pod)
    drive(app)
    assert [names_of(body) for _, _, body in transport.calls] == [["n2"], ["n1", "n2", "n3"]]
    assert [name for _, name, _ in client.bindings] == ["p"]
    assert not [e for e in client.events if e["reason"] == "FailedScheduling"]


def test_profiles_without_extenders_never_await_nor_call() -> None:
    transport = FakeTransport()
    app, client = cluster(transport, [])
    app.on_pod_event("ADDED", pending("p"))
    runtime = app.profiles["sp"]
    qpod = runtime.queue.pop_nowait()
    assert qpod is not None

    async def go() -> Any:
        cycle = app.cycles.schedule_one(runtime, qpod)
        await app.drain()
        return cycle

    assert run(go()) is None  # the synchronous cycle, as before extenders existed
    assert transport.calls == []
    assert transport.prepared == []
    assert len(client.bindings) == 1


def test_a_node_deleted_while_the_extender_filters_is_not_chosen() -> None:
    app_box: list[SchedulerApp] = []

    def filter_and_delete(_: str, body: Mapping[str, Any]) -> Any:
        app_box[0].on_node_event("DELETED", make_node("n1"))
        return {"NodeNames": names_of(body)}

    transport = FakeTransport({(URL, "filter"): filter_and_delete})
    app, client = cluster(transport, [{"urlPrefix": URL, "filterVerb": "filter", "nodeCacheCapable": True}], nodes=2)
    app_box.append(app)
    app.on_pod_event("ADDED", pending("p"))
    drive(app)
    assert client.bindings == [("default", "p", "n2")]


def test_the_chosen_node_is_judged_again_when_the_cache_changed_during_the_calls() -> None:
    app_box: list[SchedulerApp] = []

    def fill_n1(_: str, body: Mapping[str, Any]) -> Any:
        # Another cycle (or a watch event) puts a pod on n1 while the extender answers: n1 is now full.
        app_box[0].on_pod_event(None, make_pod("filler", requests={"cpu": "4"}, node_name="n1"))
        return [{"Host": n, "Score": 10 if n == "n1" else 0} for n in names_of(body)]

    transport = FakeTransport({(URL, "prio"): fill_n1})
    app, client = cluster(transport, [{"urlPrefix": URL, "prioritizeVerb": "prio", "weight": 100}], nodes=2)
    app_box.append(app)
    app.on_pod_event("ADDED", pending("p", requests={"cpu": "1"}))
    drive(app)
    assert client.bindings == []
    failed = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert failed[0]["note"].startswith("0/1 nodes are available: 1 Insufficient cpu.")


def test_an_invalid_extender_profile_keeps_the_previous_pipeline() -> None:
    transport = FakeTransport()
    app, _ = cluster(transport, [])
    serving = app.profiles["sp"].framework
    outcome = app.apply_profile(
        name="sp", spec={"extenders": [{"urlPrefix": URL, "prioritizeVerb": "p"}]}, generation=2
    )
    assert not outcome.ready
    assert "must have a positive weight applied to it" in outcome.message
    assert "previous valid pipeline keeps serving" in outcome.message
    assert app.profiles["sp"].framework is serving


def test_an_app_without_transport_refuses_extenders() -> None:
    app = new_app(None, FakeClient())
    outcome = app.apply_profile(name="sp", spec={"extenders": [{"urlPrefix": URL}]}, generation=1)
    assert not outcome.ready
    assert "no HTTP transport" in outcome.message


def test_the_chosen_node_deleted_during_the_calls_fails_that_attempt_on_it() -> None:
    app_box: list[SchedulerApp] = []

    def prefer_then_delete_n1(_: str, body: Mapping[str, Any]) -> Any:
        app_box[0].on_node_event("DELETED", make_node("n1"))
        return [{"Host": n, "Score": 10 if n == "n1" else 0} for n in names_of(body)]

    transport = FakeTransport({(URL, "prio"): prefer_then_delete_n1})
    app, client = cluster(transport, [{"urlPrefix": URL, "prioritizeVerb": "prio", "weight": 100}], nodes=2)
    app_box.append(app)
    app.on_pod_event("ADDED", pending("p"))
    drive(app)
    assert client.bindings == []
    failed = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert failed[0]["note"].startswith('0/1 nodes are available: 1 node "n1" was deleted while extenders were called.')


def test_a_profile_edit_during_the_calls_does_not_change_the_running_cycle() -> None:
    app_box: list[SchedulerApp] = []
    ext = {"urlPrefix": URL, "filterVerb": "filter", "nodeCacheCapable": True}

    def filter_and_edit(_: str, body: Mapping[str, Any]) -> Any:
        # The profile is edited (pipeline swapped) while this pod's cycle awaits the extender.
        outcome = app_box[0].apply_profile(
            name="sp", spec={"extenders": [ext], "percentageOfNodesToScore": 50}, generation=2
        )
        assert outcome.ready
        return {"NodeNames": names_of(body)}

    transport = FakeTransport({(URL, "filter"): filter_and_edit})
    app, client = cluster(transport, [ext], nodes=2)
    app_box.append(app)
    before = app.profiles["sp"].framework
    app.on_pod_event("ADDED", pending("p"))
    drive(app)
    assert app.profiles["sp"].framework is not before
    assert len(client.bindings) == 1


# -- preempt verb (wire format and callExtenders; DefaultPreemption's use is in plugins/test_default_preemption) ----
def victims_on(*pods: Any) -> PreemptionVictims:
    return PreemptionVictims(tuple(pods), 1)


def test_preemption_args_full_or_meta() -> None:
    victim = pod_info(make_pod("v", node_name="n1"))
    full = preemption_args({"p": 1}, {"n1": victims_on(victim)}, meta=False)
    assert full == {
        "Pod": {"p": 1},
        "NodeNameToVictims": {"n1": {"Pods": [victim.obj], "NumPDBViolations": 1}},
        "NodeNameToMetaVictims": None,
    }
    meta = preemption_args({"p": 1}, {"n1": victims_on(victim)}, meta=True)
    assert meta["NodeNameToMetaVictims"] == {"n1": {"Pods": [{"UID": victim.uid}], "NumPDBViolations": 1}}
    assert meta["NodeNameToVictims"] is None


def test_preemption_result_maps_uids_back_to_pods_with_upstreams_errors() -> None:
    victim = pod_info(make_pod("v", node_name="n1"))
    on_node = {"n1": [victim]}
    result = {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": victim.uid}], "NumPDBViolations": 2}}}
    assert parse_preemption_result(result, on_node.get, name=URL) == {"n1": PreemptionVictims((victim,), 2)}
    with pytest.raises(ExtenderError, match='nodeinfo not found for node name "n9"'):
        parse_preemption_result({"NodeNameToMetaVictims": {"n9": {"Pods": []}}}, on_node.get, name=URL)
    with pytest.raises(ExtenderError) as caught:
        parse_preemption_result({"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "x"}]}}}, on_node.get, name=URL)
    assert str(caught.value) == (
        f"extender: {URL} claims to preempt pod (UID: &{{x}}) on node: n1, but the pod is not found on that node"
    )


def test_preempt_extenders_shrink_candidates_in_order() -> None:
    v1, v2 = pod_info(make_pod("v1", node_name="n1")), pod_info(make_pod("v2", node_name="n2"))
    on_node = {"n1": [v1], "n2": [v2]}
    keep_n2 = {"NodeNameToMetaVictims": {"n2": {"Pods": [{"UID": v2.uid}], "NumPDBViolations": 0}}}
    empty_n2 = {"NodeNameToMetaVictims": {"n2": {"Pods": []}}}
    transport = FakeTransport(
        {("http://a", "preempt"): lambda *_: keep_n2, ("http://b", "preempt"): lambda *_: empty_n2}
    )
    a, b = build_extenders(
        [spec(urlPrefix="http://a", preemptVerb="preempt"), spec(urlPrefix="http://b", preemptVerb="preempt")],
        transport,
    )
    pod = pod_info(make_pod("p"))
    candidates = {"n1": victims_on(v1), "n2": victims_on(v2)}
    kept = run(process_preemption_with_extenders([a], pod, candidates, on_node.get))
    assert kept == {"n2": PreemptionVictims((v2,), 0)}
    assert transport.calls[0][2]["NodeNameToVictims"]["n1"]["Pods"] == [v1.obj]
    with pytest.raises(ExtenderError, match='expected at least one victim pod on node "n2"'):
        run(process_preemption_with_extenders([a, b], pod, candidates, on_node.get))
    lenient = build_extenders([spec(urlPrefix="http://b", preemptVerb="preempt", ignorable=True)], transport)
    assert run(process_preemption_with_extenders([a, *lenient], pod, candidates, on_node.get)) == {}


def test_a_preempt_verb_is_not_reported_as_unused_any_more() -> None:
    app, _ = cluster(FakeTransport(), [])
    outcome = app.apply_profile(name="sp", spec={"extenders": [{"urlPrefix": URL, "preemptVerb": "p"}]}, generation=2)
    assert outcome.ready
    assert "preempt" not in outcome.message


def full_cluster_with_victims(
    transport: FakeTransport, extenders: list[dict[str, Any]]
) -> tuple[SchedulerApp, FakeClient]:
    """Two 4-cpu nodes, each full with one priority-1 pod; then a priority-100 pod that needs one node."""
    app, client = cluster(transport, extenders, nodes=2)
    for i in (1, 2):
        victim = make_pod(f"v{i}", node_name=f"n{i}", requests={"cpu": "4"}, spec={"priority": 1}, uid=f"uid-v{i}")
        app.on_pod_event("ADDED", victim)
    app.on_pod_event("ADDED", pending("high", requests={"cpu": "4"}, spec={"priority": 100}))
    return app, client


def test_the_cycle_awaits_the_preempt_verb_and_evicts_what_the_extender_kept() -> None:
    keep_n2 = {"NodeNameToMetaVictims": {"n2": {"Pods": [{"UID": "uid-v2"}], "NumPDBViolations": 0}}}
    transport = FakeTransport({(URL, "preempt"): lambda *_: keep_n2})
    app, client = full_cluster_with_victims(transport, [{"urlPrefix": URL, "preemptVerb": "preempt"}])
    drive(app)
    assert [verb for _, verb, _ in transport.calls] == ["preempt"]
    assert sorted(transport.calls[0][2]["NodeNameToVictims"]) == ["n1", "n2"]  # both candidates were sent
    assert [name for _, name, _ in client.deleted] == ["v2"]
    nominations = [patch["status"].get("nominatedNodeName") for name, patch in client.status_patches if name == "high"]
    assert nominations == ["n2"]


def test_a_failing_preempt_verb_fails_preemption_with_its_error() -> None:
    app, client = full_cluster_with_victims(FakeTransport(), [{"urlPrefix": URL, "preemptVerb": "preempt"}])
    drive(app)
    failed = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert failed[0]["note"] == (
        f'0/2 nodes are available: 2 Insufficient cpu. preemption: Post "{URL}/preempt": dial tcp: connect: '
        "connection refused"
    )
    assert client.deleted == []
    assert (
        app.metrics.registry.get_sample_value(
            "kopf_scheduler_extender_errors_total", {"extender": URL, "verb": "preempt"}
        )
        == 1.0
    )


def test_without_score_plugins_a_prioritizer_still_decides() -> None:
    transport = FakeTransport(
        {(URL, "prio"): lambda _, body: [{"Host": n, "Score": int(n == "n3")} for n in names_of(body)]}
    )
    client = FakeClient()
    app = new_app(transport, client)
    for i in (1, 2, 3):
        app.on_node_event(None, make_node(f"n{i}"))
    no_scores = {
        "plugins": {"score": {"disabled": [{"name": "*"}]}},
        "extenders": [{"urlPrefix": URL, "prioritizeVerb": "prio", "weight": 1}],
    }
    assert app.apply_profile(name="sp", spec=no_scores, generation=1).ready
    for i in range(3):
        app.on_pod_event("ADDED", pending(f"p{i}"))
    drive(app)
    assert {node for _, _, node in client.bindings} == {"n3"}


def test_an_empty_preempt_answer_joins_dynamic_resources_reason_as_upstreams_post_filter_loop() -> None:
    """DynamicResources said Unschedulable before DefaultPreemption awaited the extender: upstream's PostFilter
    loop joins both reasons, so the awaited verdict must carry DynamicResources' part first."""
    transport = FakeTransport({(URL, "preempt"): lambda *_: {"NodeNameToMetaVictims": {}}})
    app, client = full_cluster_with_victims(transport, [{"urlPrefix": URL, "preemptVerb": "preempt"}])
    drive(app)
    failed = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert failed[0]["note"] == (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "no new claims to deallocate, preemption: no candidate node for preemption"
    )
    assert client.deleted == []
