"""CPU pinning for the end-to-end benchmark: the API server (and etcd) on some CPUs, each scheduler on others.

On a machine of two CPUs the API server shares them with the scheduler under test, so every CPU second a
scheduler spends is taken from the API server whose writes bound its rate (docs/benchmarks.md, "Gangs against their
ceiling"). On a bigger machine ``BENCH_APISERVER_CPUS`` and ``BENCH_SCHEDULER_CPUS`` (``bench/e2e.py``) give each
side CPUs of its own, the setting of a real cluster, where the API server does not run on the scheduler's node.

A process is pinned thread by thread (``sched_setaffinity`` on every task of ``/proc/<pid>/task``): a Go process
(kube-apiserver, etcd, kube-scheduler) already runs several threads when it is pinned, and the threads it starts
later inherit the mask of the thread that starts them, which is then pinned too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable


def parse_cpus(text: str) -> frozenset[int]:
    """CPU numbers as ``taskset -c`` takes them: ``"0,1"``, ``"2-3"``, ``"0,2-3"``; ``""`` is none (no pinning)."""
    cpus: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if low < 0 or high < low:
            raise ValueError(f"not a CPU range: {part!r}")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def pin_process(pid: int, cpus: Iterable[int]) -> int:
    """Pin every thread of ``pid`` to ``cpus``; returns how many threads were pinned (threads that ended meanwhile
    are skipped)."""
    mask = set(cpus)
    pinned = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), mask)
        except ProcessLookupError:
            continue
        pinned += 1
    return pinned
