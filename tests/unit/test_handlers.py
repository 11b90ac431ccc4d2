"""kopf handler rules that keep the operator correct and invisible on pods."""

from __future__ import annotations

import inspect

import kopf

import kopf_scheduler.handlers as handlers


def test_every_handler_runs_on_the_event_loop() -> None:
    """kopf runs sync handlers on worker threads; the cache and queues have no locks, so none may be sync."""
    public = {
        name: fn
        for name, fn in vars(handlers).items()
        if inspect.isfunction(fn) and fn.__module__ == handlers.__name__ and not name.startswith("_")
    }
    assert public, "no handlers found"
    assert [name for name, fn in public.items() if not inspect.iscoroutinefunction(fn)] == []


def test_pods_and_nodes_are_only_watched_with_on_event() -> None:
    """Change handlers, daemons or timers on pods would write annotations and finalizers onto every pod."""
    source = inspect.getsource(handlers)
    for forbidden in ('on.create("", "v1", "pods"', 'on.update("", "v1", "pods"', 'daemon("", "v1", "pods"'):
        assert forbidden not in source
    assert '@kopf.on.event("", "v1", "pods")' in source
    assert '@kopf.on.event("", "v1", "nodes")' in source


def test_diff_bases_are_built_for_profiles_only() -> None:
    """kopf's per-event deep copy of the essence is skipped for pods and nodes; profiles keep their diff."""
    storage = handlers._ProfileDiffBaseStorage()
    pod = kopf.Body({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "n"}})
    assert storage.build(body=pod) is None
    assert storage.fetch(body=pod) is None
    profile = kopf.Body(
        {
            "apiVersion": f"{handlers.GROUP}/{handlers.VERSION}",
            "kind": "SchedulerProfile",
            "metadata": {"name": "sp", "annotations": {}},
            "spec": {"percentageOfNodesToScore": 50},
        }
    )
    essence = storage.build(body=profile)
    assert essence is not None
    assert essence["spec"] == {"percentageOfNodesToScore": 50}
