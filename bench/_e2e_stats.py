"""Pure statistics for the end-to-end benchmark: scheduler_perf's SchedulingThroughput, percentiles, summaries.

Why a separate module: the numbers in ``docs/benchmarks.md`` are only comparable with upstream's if we
compute them exactly as ``test/integration/scheduler_perf/util.go`` (v1.36) does, so that logic lives here,
free of I/O, and is unit-tested (``tests/unit/test_bench_e2e.py``) without any cluster or timing.

scheduler_perf's ``throughputCollector``: a ticker fires every second and reads how many pods have gone
from ``spec.nodeName == ""`` to set. Ticks are ignored until the first pod is scheduled; that first tick
only sets the baseline (it is an outlier: sampling and the scheduler start independently). A tick with no
new pods is not recorded as 0 pods/s: the interval is merged into the next one with progress, and that
throughput (new pods / elapsed) is recorded once per merged tick so the percentiles stay honest. The summary
is the mean and the ``ceil(n*p/100)-1``-th element of the sorted samples.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """scheduler_perf's percentile: the ``ceil(n * pct / 100) - 1``-th of the ascending ``sorted_values``."""
    if not sorted_values:
        return math.nan
    index = max(0, math.ceil(len(sorted_values) * pct / 100) - 1)
    return float(sorted_values[min(index, len(sorted_values) - 1)])


@dataclass
class ThroughputSampler:
    """Feed it ``tick(now, scheduled)`` once per sampling interval; it keeps scheduler_perf's samples.

    ``interval`` is the nominal tick period; it is only used to count how many ticks a merged interval
    spans when the elapsed time is not an exact multiple (the recorded throughput uses the real elapsed time).
    """

    interval: float = 1.0
    samples: list[float] = field(default_factory=list)
    #: (time, total scheduled) at each recorded sample, for plots and debugging.
    progress: list[tuple[float, int]] = field(default_factory=list)
    start: float | None = None
    _last_time: float = 0.0
    _last_count: int = 0
    _skipped: int = 0

    def tick(self, now: float, scheduled: int) -> None:
        if scheduled == 0:
            return
        if self.start is None:
            # The first tick with progress only sets the baseline.
            self.start = now
            self._last_time, self._last_count = now, scheduled
            return
        new = scheduled - self._last_count
        if new <= 0:
            self._skipped += 1
            return
        elapsed = now - self._last_time
        throughput = new / elapsed if elapsed > 0 else math.inf
        self.samples.extend([throughput] * (self._skipped + 1))
        self.progress.append((now, scheduled))
        self._last_time, self._last_count, self._skipped = now, scheduled, 0

    def summary(self) -> dict[str, float]:
        """``{"average", "p50", "p90", "p95", "p99"}`` in pods/s (NaN when no sample was recorded)."""
        ordered = sorted(self.samples)
        average = sum(ordered) / len(ordered) if ordered else math.nan
        return {
            "average": average,
            "p50": percentile(ordered, 50),
            "p90": percentile(ordered, 90),
            "p95": percentile(ordered, 95),
            "p99": percentile(ordered, 99),
        }


def samples_from_bind_times(bind_times: Iterable[float], *, origin: float, interval: float = 1.0) -> ThroughputSampler:
    """Replay a run through :class:`ThroughputSampler` with ticks at ``origin + k * interval``.

    The live benchmark ticks on a real 1 s timer; this replay gives the same result for ideal ticks and is
    what the unit tests and the plots use. ``bind_times`` are the receive times of the bind events.
    """
    times = sorted(bind_times)
    sampler = ThroughputSampler(interval=interval)
    if not times:
        return sampler
    ticks = math.floor((times[-1] - origin) / interval)  # the partial last interval is dropped, as upstream
    index = 0
    for k in range(1, ticks + 1):
        now = origin + k * interval
        while index < len(times) and times[index] <= now:
            index += 1
        sampler.tick(now, index)
    return sampler


def latency_percentiles_ms(latencies_s: Iterable[float]) -> dict[str, float]:
    """p50/p99 (scheduler_perf's percentile rule) of per-pod latencies given in seconds, in milliseconds."""
    ordered = sorted(latencies_s)
    return {"latency_p50_ms": percentile(ordered, 50) * 1000.0, "latency_p99_ms": percentile(ordered, 99) * 1000.0}


def pod_latencies(created: dict[str, float], bound: dict[str, float], *, not_before: float) -> list[float]:
    """Per bound pod: bound time − max(created time, ``not_before``), in seconds.

    The benchmark creates every pod before the scheduler under test starts (as the issue prescribes), so
    a pod cannot be scheduled before that process exists; ``not_before`` is the moment it was spawned.
    A pod seen bound but never seen created (the watch started late) counts from ``not_before``.
    """
    return [t - max(created.get(uid, not_before), not_before) for uid, t in bound.items()]


def whole_run_throughput(row: dict[str, Any]) -> float:
    """Pods bound per second from the scheduler's process start to its last bind (``startup_s`` +
    ``duration_s``), NaN without both.

    Why beside scheduler_perf's throughput: that one starts at the first bind, so whatever a scheduler does
    with a backlog before it binds anything is not counted. For most workloads that is informer sync (about a
    second on either side); for the gang workloads it is kube-scheduler's queue admitting the gangs, 23-30 s
    of its CPU with the API server idle (docs/benchmarks.md, "Gangs: where kube-scheduler's start-up goes").
    """
    startup, duration = row.get("startup_s"), row.get("duration_s")
    bound = row.get("bound", row.get("pods"))
    if startup is None or duration is None or not bound:
        return math.nan
    elapsed = float(startup) + float(duration)
    return float(bound) / elapsed if elapsed > 0 else math.nan


#: Fields of a per-run row that are summarised (median over repetitions) in the summary rows.
NUMERIC_FIELDS = (
    "throughput_avg",
    "p50",
    "p90",
    "p99",
    "latency_p50_ms",
    "latency_p99_ms",
    "peak_rss_mb",
    "cpu_s",
    "startup_s",
    "duration_s",
)


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (workload, nodes, pods, scheduler): the median of each numeric field over repetitions.

    Also carries ``reps``, ``throughput_min``/``throughput_max`` (the spread of the averages),
    ``whole_run_avg`` (the median of :func:`whole_run_throughput`) and ``complete`` (every repetition bound
    every pod). Order follows first appearance in ``rows``.
    """
    groups: dict[tuple[str, int, int, str], list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["workload"], row["nodes"], row["pods"], row["scheduler"])
        groups.setdefault(key, []).append(row)
    out = []
    for (workload, nodes, pods, scheduler), group in groups.items():
        summary: dict[str, Any] = {"workload": workload, "nodes": nodes, "pods": pods, "scheduler": scheduler}
        for name in NUMERIC_FIELDS:
            values = [float(r[name]) for r in group if r.get(name) is not None and not math.isnan(float(r[name]))]
            summary[name] = statistics.median(values) if values else math.nan
        averages = [float(r["throughput_avg"]) for r in group if not math.isnan(float(r["throughput_avg"]))]
        summary["throughput_min"] = min(averages) if averages else math.nan
        summary["throughput_max"] = max(averages) if averages else math.nan
        whole = [w for w in map(whole_run_throughput, group) if not math.isnan(w)]
        summary["whole_run_avg"] = statistics.median(whole) if whole else math.nan
        summary["reps"] = len(group)
        summary["complete"] = all(bool(r.get("complete")) for r in group)
        out.append(summary)
    return out


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when either is missing or the denominator is 0."""
    if denominator is None or numerator is None or math.isnan(numerator) or math.isnan(denominator):
        return math.nan
    return numerator / denominator if denominator else math.nan
