"""``python -m tests.conformance``: the differential conformance run behind ``make conformance``.

Starts the harness once (local control plane, upstream kube-scheduler, kopf-scheduler), runs N seeded
scenarios (``--scenarios``, default ``$CONFORMANCE_SCENARIOS`` or 100: a few minutes on 2 cores), then
writes ``bench/results/conformance.json`` and ``docs/conformance.md``. Exits 1 when a disagreement is not
explained by ``tests/conformance/known.py``, so it can gate CI too.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.conformance.generator import SIZES, generate
from tests.conformance.report import (
    DOC_PATH,
    JSON_PATH,
    RunInfo,
    annotate_known,
    now_utc,
    summary,
    write_json,
    write_markdown,
)
from tests.conformance.runner import Harness, ScenarioResult, default_profiles

DEFAULT_SCENARIOS = 100


def size_for(seed: int, sizes: str) -> str:
    """``mixed``: one scenario in eight is xl (60-99 nodes), one in eight large (10-40), the others normal."""
    if sizes == "mixed":
        return {7: "xl", 3: "large"}.get(seed % 8, "normal")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenarios",
        type=int,
        default=int(os.environ.get("CONFORMANCE_SCENARIOS") or DEFAULT_SCENARIOS),
        help=f"how many scenarios (default $CONFORMANCE_SCENARIOS or {DEFAULT_SCENARIOS})",
    )
    parser.add_argument("--seed-start", type=int, default=1, help="seed of the first scenario (default 1)")
    parser.add_argument("--size", choices=[*SIZES, "mixed"], default="mixed", help="scenario size (default mixed)")
    parser.add_argument("--profiles", default="", help="comma-separated profile names (default: all)")
    parser.add_argument("--no-examples", action="store_true", help="only the built-in default profile")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep logs here (default: .cluster/conformance)")
    parser.add_argument("--json", type=Path, default=JSON_PATH, help=f"summary JSON (default {JSON_PATH})")
    parser.add_argument("--doc", type=Path, default=DOC_PATH, help=f"Markdown report (default {DOC_PATH})")
    parser.add_argument("--no-write", action="store_true", help="print the summary, write no files")
    args = parser.parse_args(argv)

    profiles = default_profiles(include_examples=not args.no_examples)
    if args.profiles:
        wanted = [name.strip() for name in args.profiles.split(",") if name.strip()]
        unknown = sorted(set(wanted) - {p.name for p in profiles})
        if unknown:
            parser.error(f"unknown profiles {unknown}; known: {[p.name for p in profiles]}")
        profiles = [p for p in profiles if p.name in wanted]
    work_dir = args.work_dir or Path(".cluster") / "conformance"
    started_at = now_utc()
    started = time.monotonic()
    results: list[ScenarioResult] = []
    with Harness(profiles, work_dir=work_dir.resolve(), log=lambda text: print(text, flush=True)) as harness:
        for i in range(args.scenarios):
            seed = args.seed_start + i
            size = size_for(seed, args.size)
            profile = profiles[seed % len(profiles)]
            result = harness.run_scenario(generate(seed, size), profile.name)
            results.append(result)
            agree = sum(p.agree for p in result.pods)
            print(
                f"scenario {i + 1}/{args.scenarios}: seed {seed} ({size}, {result.nodes} nodes, "
                f"{result.existing_pods} existing pods) profile {profile.name}: {agree}/{len(result.pods)} agree "
                f"in {result.seconds:.1f}s",
                flush=True,
            )
    annotate_known(results)
    command = "python -m tests.conformance " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    run = RunInfo.collect(
        command=command.strip(),
        seed_start=args.seed_start,
        sizes=args.size,
        seconds=time.monotonic() - started,
        started=started_at,
    )
    data = summary(results, profiles, run)
    if not args.no_write:
        write_json(data, args.json)
        write_markdown(data, results, profiles, args.doc)
        print(f"wrote {args.json} and {args.doc}")
    print(
        f"{data['scenarios']} scenarios, {data['pods']} pods: {data['agree']} agree, {data['disagree']} disagree "
        f"({data['known']} known) in {data['run']['seconds']}s"
    )
    unexplained = [d for d in data["disagreements"] if not d["known"]]
    for item in unexplained:
        print(f"UNEXPLAINED: seed {item['seed']} {item['profile']} {item['pod']}: {item['problems']}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
