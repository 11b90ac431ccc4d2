"""``python -m tests.conformance --timelines N``: the default-profile timelines against kube-scheduler v1.36.3.

Why a module of its own: __main__.py stays a thin list of parts; this one owns its options, its run and its
report (timeline_report.py). Seeds are drawn fresh unless ``--timeline-seed-start`` (printed and recorded, so any
timeline replays). ``--timeline-workers W`` runs W harnesses (two control planes each) in threads, the seeds dealt
round robin: a timeline mostly waits (quiet periods, backoff), so two harnesses nearly halve the wall time.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from pathlib import Path

from tests.conformance import timeline_report
from tests.conformance.default_timelines import generate_default_timeline
from tests.conformance.report import RunInfo, now_utc
from tests.conformance.runner import DEFAULT_PROFILE
from tests.conformance.timeline_harness import TimelineHarness, TimelineResult, summary

#: With the gang timelines' 24, more than the 100 multi-step scenarios a full run needs (issue 37).
DEFAULT_TIMELINES = 80
#: Harnesses side by side: two on two cores keep a run of 80 under 40 minutes.
DEFAULT_WORKERS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timelines",
        type=int,
        default=int(os.environ.get("CONFORMANCE_TIMELINES") or DEFAULT_TIMELINES),
        help=f"default-profile timelines (multi-step scenarios) against kube-scheduler, on control planes of their "
        f"own (default $CONFORMANCE_TIMELINES or {DEFAULT_TIMELINES}; 0: none)",
    )
    parser.add_argument(
        "--timeline-seed-start", type=int, default=None, help="seed of the first timeline (default: drawn fresh)"
    )
    parser.add_argument(
        "--timeline-workers",
        type=int,
        default=int(os.environ.get("CONFORMANCE_TIMELINE_WORKERS") or DEFAULT_WORKERS),
        help=f"harnesses run side by side (default $CONFORMANCE_TIMELINE_WORKERS or {DEFAULT_WORKERS})",
    )
    parser.add_argument(
        "--timeline-budget",
        type=float,
        default=float(os.environ.get("CONFORMANCE_TIMELINE_BUDGET") or 0),
        help="seconds after which no further timeline starts (the report says how many ran; default 0: no limit)",
    )
    parser.add_argument("--timelines-only", action="store_true", help="only the default-profile timelines")


def run_default_timelines(args: argparse.Namespace, command: str) -> int:
    """Play the timelines, print each verdict, write the JSON and the page's section; 1 on any disagreement."""
    count, workers = args.timelines, max(1, min(args.timeline_workers, args.timelines))
    start = args.timeline_seed_start
    seed_start = start if start is not None else random.SystemRandom().randrange(10**6)
    print(f"default timelines: seeds {seed_start}..{seed_start + count - 1}, {workers} harness(es)", flush=True)
    work_dir = ((args.work_dir or Path(".cluster") / "conformance") / "timelines").resolve()
    started_at, started = now_utc(), time.monotonic()
    results: list[TimelineResult] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        log = lambda text: print(f"[{index}] {text}", flush=True)  # noqa: E731
        harness = TimelineHarness([DEFAULT_PROFILE], work_dir=work_dir / str(index), log=log, workload_aware=False)
        with harness:
            for seed in range(seed_start + index, seed_start + count, workers):
                if args.timeline_budget and time.monotonic() - started > args.timeline_budget:
                    log(f"time budget of {args.timeline_budget:.0f}s spent: no further timeline starts")
                    break
                result = harness.run_timeline(generate_default_timeline(seed, DEFAULT_PROFILE.name))
                with lock:
                    results.append(result)
                    _print(result, len(results), count)

    threads = [threading.Thread(target=worker, args=(i,), name=f"timelines-{i}") for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.sort(key=lambda r: r.seed)
    run = RunInfo.collect(
        command=command, seed_start=seed_start, sizes="-", seconds=time.monotonic() - started, started=started_at,
        seeds_fresh=args.timeline_seed_start is None,
    )  # fmt: skip
    data = {
        **summary(results),
        "workers": workers,
        "requested": count,
        "budget_seconds": args.timeline_budget,
        "feature_table": timeline_report.feature_table(results),
        "timing": timeline_report.timing(results),
        "run": vars(run),
    }
    if not args.no_write:
        timeline_report.write_json(data, results, args.json.parent / timeline_report.TIMELINES_JSON_PATH.name)
        timeline_report.put_section(timeline_report.section(data, results), args.doc)
        print(f"wrote {timeline_report.TIMELINES_JSON_PATH.name} and the timelines section of {args.doc}")
    print(
        f"default timelines: {data['timelines']} timelines, {data['agree']} agree, {data['disagree']} disagree, "
        f"{data['diverged_on_tie']} diverged on a tie, in {round(run.seconds)}s"
    )
    stopped_early = len(results) < count and not args.timeline_budget
    return 1 if data["disagree"] or stopped_early else 0


def _print(result: TimelineResult, done: int, count: int) -> None:
    verdict = "agree" if result.agree else "DISAGREE"
    tie = f", diverged on a tie at step {result.diverged_on_tie}" if result.diverged_on_tie is not None else ""
    print(f"timeline {done}/{count}: seed {result.seed}: {verdict} ({len(result.steps)} steps{tie}) "
          f"in {result.seconds}s", flush=True)  # fmt: skip
    for step in result.steps:
        for problem in step.problems:
            print(f"  step {step.index} ({step.label}): {problem}", flush=True)
    if result.error:
        print(f"  harness error: {result.error}", flush=True)
