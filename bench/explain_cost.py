"""What keeping success accounts costs the scheduling cycle: ``bench.algo``'s cycle with and without capture.

The capture (:func:`kopf_scheduler.explain.capture_scores` plus :meth:`Explanations.record_success`) runs in
the synchronous scheduling cycle, so it is measured there: the same (workload, nodes) row is run alternately
without and with it, ``--repeat`` times each, and the fastest p50 of each side is compared (foreign load only
adds time). On a shared machine that difference is noisy, so the capture is also timed alone: the results of
1000 real cycles captured again and again (the fastest of 7 passes, per call). Prints one line per row;
``docs/benchmarks.md`` ("Cost of success accounts") records a run.

``--annotations`` times instead what ``spec.explain.annotations`` adds on top of the capture: building a bound
pod's annotations (:func:`kopf_scheduler.decisions.success_annotations` and ``with_stale_cleared``) over the
captures of 1000 real cycles, and a failed attempt's (``failure_annotations`` and the ``unchanged`` check) for a
pod that fits no node of the cluster (every node judged), with the bytes each writes. ``docs/benchmarks.md``
("Cost of explain annotations") records a run.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence

from bench._synthetic import WORKLOADS, make_cluster
from bench.algo import CYCLES, SEED, default_framework, machine, measure
from kopf_scheduler.algorithm import FitError, ScheduleResult, schedule_pod
from kopf_scheduler.decisions import failure_annotations, success_annotations, unchanged, with_stale_cleared
from kopf_scheduler.explain import Explanations, capture_scores, explain_fit_error
from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.schedule_one import assume_and_reserve
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo


def _best_us(calls: int, passes: int, run: Callable[[], object]) -> float:
    """Microseconds per call of ``run()`` (which makes ``calls`` calls), the fastest of ``passes`` passes."""
    best = float("inf")
    for _ in range(passes):
        started = time.perf_counter_ns()
        run()
        best = min(best, (time.perf_counter_ns() - started) / calls / 1e3)
    return best


def _cycles(
    workload: str, nodes: int, cycles: int
) -> tuple[ClusterCache, Framework, random.Random, list[ScheduleResult]]:
    """A cluster of ``nodes`` and the results of ``cycles`` real cycles of ``workload`` on it, each pod assumed."""
    cache = make_cluster(nodes)
    framework = default_framework(cache)
    rng = random.Random(SEED)
    results: list[ScheduleResult] = []
    for i in range(cycles):
        pod = PodInfo.from_obj(WORKLOADS[workload](i))
        state = CycleState()
        result = schedule_pod(framework, state, pod, cache.snapshot(), rng=rng)
        assume_and_reserve(framework, state, pod, result, cache)
        results.append(result)
    return cache, framework, rng, results


def annotations_cost(workload: str, nodes: int, *, cycles: int = 1000, passes: int = 7) -> dict[str, float]:
    """µs per bound pod's and per failed attempt's annotations, and their bytes (``--annotations``)."""
    cache, framework, rng, results = _cycles(workload, nodes, cycles)
    captures = [capture_scores(result, cache.table.names, at=0.0) for result in results]
    success = _best_us(
        len(captures), passes, lambda: [with_stale_cleared(success_annotations("sp", c), {}) for c in captures]
    )
    written = [success_annotations("sp", c) for c in captures]
    huge = WORKLOADS[workload](cycles)
    huge["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100000"}}
    pod = PodInfo.from_obj(huge)
    try:
        schedule_pod(framework, CycleState(), pod, cache.snapshot(), rng=rng)
        raise AssertionError("the pod fits somewhere")
    except FitError as fit:
        account = explain_fit_error(fit, profile="sp", at="t")
    failed = failure_annotations(account)
    calls = 100
    failure = _best_us(calls, passes, lambda: [unchanged(failure_annotations(account), failed) for _ in range(calls)])
    return {
        "success_us": success,
        "success_bytes": sum(len(v.encode()) for a in written for v in a.values()) / len(written),
        "failure_us": failure,
        "failure_bytes": sum(len(v.encode()) for v in failed.values()),
    }


def capture_alone_us(workload: str, nodes: int, *, cycles: int = 1000, passes: int = 7) -> float:
    """Microseconds per :func:`capture_scores` call over the results of ``cycles`` real cycles (fastest pass)."""
    cache, _, _, results = _cycles(workload, nodes, cycles)
    names = cache.table.names
    best = float("inf")
    for _ in range(passes):
        started = time.perf_counter_ns()
        for result in results:
            capture_scores(result, names, at=0.0)
        best = min(best, (time.perf_counter_ns() - started) / len(results) / 1e3)
    return best


def compare(workload: str, nodes: int, *, repeat: int, cycles: int) -> dict[str, float]:
    """Fastest p50 and mean cycle time (ms) without and with capture, and the difference in percent."""
    off: list[tuple[float, float]] = []
    on: list[tuple[float, float]] = []
    for _ in range(repeat):
        for side, accounts in ((off, None), (on, Explanations())):
            run, _ = measure(workload, nodes, cycles=cycles, accounts=accounts)
            side.append((run.p50_ms, float(run.durations_ns.mean()) / 1e6))
    p50_off, p50_on = min(p for p, _ in off), min(p for p, _ in on)
    mean_off, mean_on = min(m for _, m in off), min(m for _, m in on)
    return {
        "p50_off_ms": p50_off,
        "p50_on_ms": p50_on,
        "p50_delta_pct": 100 * (p50_on - p50_off) / p50_off,
        "mean_off_ms": mean_off,
        "mean_on_ms": mean_on,
        "mean_delta_pct": 100 * (mean_on - mean_off) / mean_off,
        "p50_runs_off": [round(p, 4) for p, _ in off],
        "p50_runs_on": [round(p, 4) for p, _ in on],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.explain_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,5000", help="node counts, comma-separated")
    parser.add_argument("--workloads", default="plain", help="workloads, comma-separated (bench.algo's)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side, alternating")
    parser.add_argument("--cycles", type=int, default=None, help="measured cycles per run (default: bench.algo's)")
    parser.add_argument("--annotations", action="store_true", help="time spec.explain.annotations' part instead")
    args = parser.parse_args(argv)
    info = machine()
    print(f"commit {info['commit']}, {info['nproc']} × {info['cpu']}, Python {info['python']}", flush=True)
    if args.annotations:
        for workload in (w for w in args.workloads.split(",") if w):
            for nodes in (int(n) for n in args.sizes.split(",") if n):
                c = annotations_cost(workload, nodes)
                print(
                    f"{workload} {nodes} nodes: bound pod {c['success_us']:.1f} µs, {c['success_bytes']:.0f} bytes; "
                    f"failed attempt {c['failure_us']:.1f} µs, {c['failure_bytes']:.0f} bytes",
                    flush=True,
                )
        return 0
    for workload in (w for w in args.workloads.split(",") if w):
        for nodes in (int(n) for n in args.sizes.split(",") if n):
            r = compare(workload, nodes, repeat=args.repeat, cycles=args.cycles or CYCLES[workload])
            alone = capture_alone_us(workload, nodes)
            print(
                f"{workload} {nodes} nodes: p50 {r['p50_off_ms']:.4f} → {r['p50_on_ms']:.4f} ms "
                f"({r['p50_delta_pct']:+.1f}%), mean {r['mean_off_ms']:.4f} → {r['mean_on_ms']:.4f} ms "
                f"({r['mean_delta_pct']:+.1f}%); p50 per run off {r['p50_runs_off']} on {r['p50_runs_on']}; "
                f"capture alone {alone:.1f} µs/cycle ({100 * alone / 1e3 / r['p50_off_ms']:.1f}% of the p50)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
