"""A pod parked by Permit: allowed once every waiting plugin allows, rejected by the first rejection or timeout."""

from __future__ import annotations

import asyncio

from kopf_scheduler.framework import Code
from kopf_scheduler.framework.runtime.binding import BindingRunner
from kopf_scheduler.framework.waiting_pods import WaitingPod
from tests.unit.factories import make_pod, pod_info


def test_allowed_once_every_plugin_allows() -> None:
    waiting = WaitingPod(pod_info(make_pod()), {"P1": 30.0, "P2": 30.0})
    assert sorted(waiting.pending_plugins) == ["P1", "P2"]

    async def scenario() -> bool:
        task = asyncio.ensure_future(waiting.wait())
        waiting.allow("P1")
        await asyncio.sleep(0)
        still_waiting = not task.done()
        waiting.allow("P2")
        return still_waiting and (await task).is_success

    assert asyncio.run(scenario())
    assert waiting.pending_plugins == []


def test_first_rejection_wins() -> None:
    waiting = WaitingPod(pod_info(make_pod()), {"P1": 30.0, "P2": 30.0})
    waiting.reject("P2", "no room")
    waiting.reject("P1", "later")
    waiting.allow("P1")
    status = asyncio.run(waiting.wait())
    assert (status.code, status.plugin, status.message) == (Code.UNSCHEDULABLE, "P2", "no room")


def test_timeout_rejects_with_upstream_text_at_the_first_deadline() -> None:
    waiting = WaitingPod(pod_info(make_pod()), {"Slow": 0.01, "Slower": 60.0})
    status = asyncio.run(waiting.wait())
    assert (status.code, status.plugin) == (Code.UNSCHEDULABLE, "Slow")
    assert status.message == "rejected due to timeout after waiting 10ms at plugin Slow"


def test_allow_waiting_pod_releases_the_plugins_hold_through_the_handle() -> None:
    """Upstream ``GetWaitingPod(uid).Allow``: the pod binds once no plugin holds it; an unknown pod is no-op."""

    class Runner(BindingRunner):
        def __init__(self) -> None:
            self.waiting_pods: dict[str, WaitingPod] = {}

    runner = Runner()
    waiting = WaitingPod(pod_info(make_pod("p")), {"A": 30.0, "B": 30.0})
    runner.waiting_pods[waiting.pod.uid] = waiting
    assert runner.allow_waiting_pod(waiting.pod.uid, "A")
    assert waiting.pending_plugins == ["B"]
    assert runner.allow_waiting_pod(waiting.pod.uid, "B")
    assert waiting.pending_plugins == []
    assert not runner.allow_waiting_pod("nobody", "A")
