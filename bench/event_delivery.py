"""CPU per pod watch event: kopf's per-object machinery against the direct delivery of on.event-only kinds.

``python -m bench.event_delivery [pods] [repetitions]`` (defaults 20000 and 3) replays each pod's two watch events
(ADDED pending, for a live profile's queue; MODIFIED bound to a node) into a SchedulerApp with a fake client, in
a fresh interpreter per way and repetition, alternating:

* ``kopf``: kopf's own watcher (a worker task per object) and processing (memory, body, causes, handler
  invocation), as every pod event goes without ``kopf_hooks.deliver_on_event_straight``;
* ``direct``: the same watcher name after the start-up handler replaced it (events straight to ``pod_event``).

Both get the events from a stand-in for kopf's ``infinite_watch``, so no API server or JSON decoding is involved:
the difference is kopf's per-event machinery alone. Prints µs of CPU per event (the whole replay's process time
over the event count). The numbers behind that replacement (docs/benchmarks.md); a measurement, not a test.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import gc
import statistics
import subprocess
import sys
import time
from typing import Any

WAYS = ("kopf", "direct")


def pod_events(pods: int) -> list[dict[str, Any]]:
    """Every pod's ADDED (pending for profile ``sp``), then every pod's MODIFIED (bound): a backlog's order."""
    from tests.unit.app_harness import pending

    added, modified = [], []
    for index in range(pods):
        pod = pending(f"pod-{index:06d}", scheduler="sp")
        pod["metadata"].update(uid=f"uid-{index}", resourceVersion=str(100 + 2 * index))
        bound = copy.deepcopy(pod)
        bound["spec"]["nodeName"] = "node-1"
        bound["metadata"]["resourceVersion"] = str(101 + 2 * index)
        added.append({"type": "ADDED", "object": pod})
        modified.append({"type": "MODIFIED", "object": bound})
    return added + modified


async def replay(way: str, pods: int) -> float:
    """µs of CPU per event for one way, in this process."""
    import kopf
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import ephemera, references
    from kopf._core.actions import lifecycles
    from kopf._core.engines import indexing
    from kopf._core.reactor import inventory, processing, queueing

    from kopf_scheduler import handlers, kopf_hooks
    from tests.unit.app_harness import new_app

    app = new_app()
    app.apply_profile(name="sp", spec={}, generation=1)
    events = pod_events(pods)
    delivered = 0
    on_pod_event = app.on_pod_event

    def counting(kind: str | None, obj: dict[str, Any]) -> None:
        nonlocal delivered
        delivered += 1
        on_pod_event(kind, obj)
        if delivered == len(events):
            all_delivered.set()

    app.on_pod_event = counting  # type: ignore[method-assign]
    all_delivered = asyncio.Event()

    async def infinite_watch(**_: Any) -> Any:
        for event in events:
            yield event
        await all_delivered.wait()  # then the stream ends, and kopf's watcher with it (its workers told to stop)

    watching.infinite_watch = infinite_watch  # type: ignore[assignment]
    memo = ephemera.AnyMemo(ephemera.Memo(app=app))
    registry = kopf.get_default_registry()
    settings = kopf.OperatorSettings()
    settings.queueing.idle_timeout = 1.0  # as the operator set it while pods went through these workers
    settings.posting.enabled = False
    processor = functools.partial(
        processing.process_resource_event,
        lifecycle=lifecycles.all_at_once,
        registry=registry,
        settings=settings,
        indexers=indexing.OperatorIndexers(),
        memories=inventory.ResourceMemories(),
        memobase=memo,
        operator_paused=None,
        event_queue=asyncio.Queue(),
    )
    if way == "direct":
        kopf_hooks.deliver_on_event_straight(registry, memo, module=handlers.__name__, logger=handlers.logger)
    resource = references.Resource(group="", version="v1", plural="pods", namespaced=True)
    gc.collect()
    gc.freeze()
    started = time.process_time()
    watcher = asyncio.ensure_future(
        queueing.watcher(
            namespace=None,
            settings=settings,
            resource=resource,
            processor=functools.partial(processor, resource=resource),
        )
    )
    await all_delivered.wait()
    spent = time.process_time() - started
    await watcher
    return 1e6 * spent / len(events)


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--one":
        way, pods = argv[1], int(argv[2])
        print(f"{asyncio.run(replay(way, pods)):.1f}")
        return
    pods = int(argv[0]) if argv else 20000
    repetitions = int(argv[1]) if len(argv) > 1 else 3
    results: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(repetitions):
        for way in WAYS:
            out = subprocess.run(
                [sys.executable, "-m", "bench.event_delivery", "--one", way, str(pods)],
                check=True,
                capture_output=True,
                text=True,
            )
            results[way].append(float(out.stdout.split()[-1]))
    for way, values in results.items():
        runs = " / ".join(f"{v:.0f}" for v in values)
        median = statistics.median(values)
        print(f"{way:>6}: {median:6.0f} µs of CPU per pod event (runs: {runs}; {pods} pods, 2 events each)")
    ratio = statistics.median(results["kopf"]) / statistics.median(results["direct"])
    print(f"kopf / direct: {ratio:.1f}×")


if __name__ == "__main__":
    main(sys.argv[1:])
