"""The preemptor's nomination reaches the API server before its victims are evicted (issue 37).

Upstream's next attempt for a preemptor tries its ``status.nominatedNodeName`` alone first
(``schedule_one.go`` ``findNodesThatFitPod`` → ``evaluateNominatedNode``), reading the pod as its informer last
delivered it. Upstream patches that nomination in ``handleSchedulingFailure`` (``updatePod``, synchronous), while the
preemption goroutine (``executor.go`` ``prepareCandidateAsync``) needs two calls per victim, a DisruptionTarget patch
and then the DELETE, over the same HTTP/2 connection: the nomination is in the watch before the victim's deletion,
which is what makes the preemptor schedulable again. Ours sends its writes over a pool of HTTP/1.1 connections,
where the victim's DELETE, reusing the connection its first call just freed, could overtake the nomination patch
still opening a connection of its own; the preemptor then came back without its nomination, skipped the nominated
node and was bound by the full search to another node that had become feasible (conformance seed 690415, p25:
bound to n44, nominated for n04). So the executor lets the preemptor's pending status writes settle first.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.settings import RunSettings
from tests.unit.app_harness import FakeClient, FakeClock, pending
from tests.unit.factories import make_node, make_pod


class OrderedClient(FakeClient):
    """Records the order in which writes are answered; the preemptor's status patch is answered late, as a
    request that first opens a connection of its own."""

    def __init__(self, slow: str) -> None:
        super().__init__()
        self.slow = slow
        self.order: list[str] = []

    async def patch_pod_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> Any:
        if name == self.slow:
            await asyncio.sleep(0.05)
        result = await super().patch_pod_status(namespace=namespace, name=name, patch=patch)
        nominated = patch["status"].get("nominatedNodeName")
        self.order.append(f"status {name}" + (f" nominated {nominated}" if nominated else ""))
        return result

    async def delete_pod(self, *, namespace: str, name: str, uid: str) -> None:
        await super().delete_pod(namespace=namespace, name=name, uid=uid)
        self.order.append(f"delete {name}")


def preempting(client: OrderedClient) -> SchedulerApp:
    """One 4-cpu node full with a priority-1 pod; a priority-100 pod that needs the whole node."""
    app = SchedulerApp(settings=RunSettings(), client=client, rng=random.Random(1), hostname="t", clock=FakeClock())
    app.on_node_event(None, make_node("n1", cpu="4"))
    assert app.apply_profile(name="sp", spec={}, generation=1).ready
    app.on_pod_event("ADDED", make_pod("victim", node_name="n1", requests={"cpu": "4"}, spec={"priority": 1}))
    app.on_pod_event("ADDED", pending("high", requests={"cpu": "4"}, spec={"priority": 100}))
    return app


def run_one_cycle(app: SchedulerApp) -> None:
    async def go() -> None:
        runtime = app.profiles["sp"]
        qpod = runtime.queue.pop_nowait()
        assert qpod is not None
        app.cycles.schedule_one(runtime, qpod)
        await app.drain()

    asyncio.run(go())


@pytest.mark.parametrize("slow", ["high", "victim", "nobody"])
def test_the_victim_is_evicted_only_once_the_preemptors_nomination_is_written(slow: str) -> None:
    client = OrderedClient(slow=slow)
    app = preempting(client)
    run_one_cycle(app)
    # The nomination first, then the victim's DisruptionTarget condition and its DELETE, whichever is answered late.
    assert client.order == ["status high nominated n1", "status victim", "delete victim"]
    assert [d[1] for d in client.deleted] == ["victim"]
