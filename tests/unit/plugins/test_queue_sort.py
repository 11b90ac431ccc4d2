"""PrioritySort (reference §2.1): higher priority first, then the earlier queue timestamp."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kopf_scheduler.plugins.queue_sort import PrioritySort
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import FakeHandle, make_pod, pod_info


@dataclass
class Queued:
    pod: PodInfo
    timestamp: float


def queued(priority: int | None, timestamp: float) -> Queued:
    spec = {} if priority is None else {"priority": priority}
    return Queued(pod_info(make_pod(spec=spec)), timestamp)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        pytest.param(queued(10, 5.0), queued(1, 1.0), True, id="higher-priority-first-even-if-newer"),
        pytest.param(queued(1, 1.0), queued(10, 5.0), False, id="lower-priority-later"),
        pytest.param(queued(5, 1.0), queued(5, 2.0), True, id="equal-priority-older-first"),
        pytest.param(queued(5, 2.0), queued(5, 1.0), False, id="equal-priority-newer-later"),
        pytest.param(queued(5, 1.0), queued(5, 1.0), False, id="identical-is-not-less"),
        pytest.param(queued(None, 1.0), queued(0, 2.0), True, id="missing-priority-is-zero"),
        pytest.param(queued(-1, 1.0), queued(None, 2.0), False, id="negative-below-default"),
    ],
)
def test_less(a: Queued, b: Queued, expected: bool) -> None:
    assert PrioritySort(handle=FakeHandle()).less(a, b) is expected


def test_sorting_a_queue() -> None:
    plugin = PrioritySort(handle=FakeHandle())
    pods = [queued(0, 3.0), queued(100, 9.0), queued(0, 1.0), queued(100, 2.0), queued(50, 0.5)]
    order = sorted(
        range(len(pods)), key=lambda i: [plugin.less(pods[j], pods[i]) for j in range(len(pods))].count(True)
    )
    assert [(pods[i].pod.priority, pods[i].timestamp) for i in order] == [
        (100, 2.0),
        (100, 9.0),
        (50, 0.5),
        (0, 1.0),
        (0, 3.0),
    ]


def test_registers_no_events() -> None:
    # It never rejects a pod, so no cluster event needs to requeue one.
    assert PrioritySort(handle=FakeHandle()).events_to_register() == []
