"""``python -m tests.conformance``: the differential conformance run behind ``make conformance``.

Starts the harness once (local control plane, upstream kube-scheduler, kopf-scheduler), runs N seeded
scenarios (``--scenarios``, default ``$CONFORMANCE_SCENARIOS`` or 100: about 40 minutes on 2 cores), then
writes ``bench/results/conformance.json`` and ``docs/conformance.md``. Then it compares profile validation
(``--validation-specs``, default ``$CONFORMANCE_VALIDATION_SPECS`` or 400 generated SchedulerProfile specs,
no cluster needed: see profile_validation.py) and writes ``bench/results/profile-validation.json`` and the
page's "Profile validation" section. Then the gang timelines (``--gang-timelines``, default
``$CONFORMANCE_GANG_TIMELINES`` or 24: workload-aware profiles against kube-scheduler with the four gates on, two
control planes of their own, see timeline_harness.py; seeds drawn fresh unless ``--gang-seed-start``; topology
constraints and preemption on unless ``--gang-switches`` says otherwise) write
``bench/results/conformance-gangs.json`` and the page's gang section. Then the big clusters (``--big-clusters``,
default ``$CONFORMANCE_BIG_CLUSTERS`` or 10 scenarios of 1000-5000 nodes, sampling compared exactly, a harness of
their own, see big_clusters.py; seeds drawn fresh unless ``--big-seed-start``) write
``bench/results/conformance-big-clusters.json`` and the page's big-cluster section. Exits 1 when a disagreement
is not explained by ``tests/conformance/known.py`` (scenarios; big clusters allow none) or is not a documented
deviation (validation), so it can gate CI too. Then the default-profile timelines (``--timelines``, default
``$CONFORMANCE_TIMELINES`` or 80: multi-step scenarios, see timeline_run.py) write
``bench/results/conformance-timelines.json`` and the page's timelines section.

Seeds are fresh on every run (issue 37): the first seed is drawn at random unless ``--seed-start`` gives it, and
is printed and recorded, so any run is reproduced with ``--seed-start``; the scenarios, the extender scenarios
and the validation specs all start there. A disagreement found on a seed is then pinned in the quick suite
(``QUICK_SCENARIOS`` of test_quick.py; the line printed for it says how). Most scenarios run upstream's default
profile unmodified (``spec: {}``, :data:`DEFAULT_PROFILE_SHARE`); the other profiles share the rest
(:func:`profile_for`, a function of the seed).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.conformance import (
    big_report,
    extender_harness,
    gang_report,
    parts_report,
    profile_validation,
    timeline_report,
    timeline_run,
    validation_report,
)
from tests.conformance.big_clusters import big_size_for, generate_big
from tests.conformance.gang_timelines import FEATURES, generate_timeline
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
from tests.conformance.runner import DEFAULT_PROFILE, Harness, ProfileDef, ScenarioResult, default_profiles
from tests.conformance.timeline_harness import TimelineHarness, TimelineResult, workload_aware_profiles
from tests.conformance.timeline_harness import summary as gang_summary

DEFAULT_SCENARIOS = 100
DEFAULT_VALIDATION_SPECS = 400
DEFAULT_EXTENDER_SCENARIOS = 12
DEFAULT_GANG_TIMELINES = 24
DEFAULT_BIG_CLUSTERS = 10
EXTENDER_JSON_PATH = JSON_PATH.parent / "conformance-extenders.json"


#: The share of scenarios that run upstream's default profile (``spec: {}``, unmodified): the profile users meet.
DEFAULT_PROFILE_SHARE = 0.6


def fresh_seed() -> int:
    """A first seed nobody chose: a new range on every run (issue 37)."""
    return random.SystemRandom().randrange(1, 10**6)


def default_profile(profiles: Sequence[ProfileDef]) -> ProfileDef | None:
    """The profile that is upstream's default profile unmodified: an empty spec on both sides."""
    return next((p for p in profiles if not p.spec and p.upstream_spec is None), None)


def profile_for(seed: int, profiles: Sequence[ProfileDef]) -> ProfileDef:
    """The profile of ``seed``'s scenario: the default one with :data:`DEFAULT_PROFILE_SHARE`, else one of the others
    (drawn from the seed alone, so ``--seed-start S --scenarios 1`` reruns the same pair)."""
    rng = random.Random(f"profile-{seed}")
    default = default_profile(profiles)
    others = [p for p in profiles if p is not default]
    if default is not None and (not others or rng.random() < DEFAULT_PROFILE_SHARE):
        return default
    return others[rng.randrange(len(others))]


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
    parser.add_argument(
        "--seed-start",
        type=int,
        default=None,
        help="seed of the first scenario and validation spec (default: drawn fresh, printed and recorded)",
    )
    parser.add_argument("--size", choices=[*SIZES, "mixed"], default="mixed", help="scenario size (default mixed)")
    parser.add_argument("--profiles", default="", help="comma-separated profile names (default: all)")
    parser.add_argument("--no-examples", action="store_true", help="only the built-in default profile")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep logs here (default: .cluster/conformance)")
    parser.add_argument("--json", type=Path, default=JSON_PATH, help=f"summary JSON (default {JSON_PATH})")
    parser.add_argument("--doc", type=Path, default=DOC_PATH, help=f"Markdown report (default {DOC_PATH})")
    parser.add_argument("--no-write", action="store_true", help="print the summary, write no files")
    parser.add_argument(
        "--validation-specs",
        type=int,
        default=int(os.environ.get("CONFORMANCE_VALIDATION_SPECS") or DEFAULT_VALIDATION_SPECS),
        help=f"profile specs to validate on both sides (default $CONFORMANCE_VALIDATION_SPECS or "
        f"{DEFAULT_VALIDATION_SPECS}; 0: none)",
    )
    parser.add_argument("--validation-only", action="store_true", help="only the profile-validation comparison")
    parser.add_argument(
        "--extender-only", action="store_true", help="only the extender comparison (the page keeps the rest)"
    )
    parser.add_argument(
        "--extender-scenarios",
        type=int,
        default=int(os.environ.get("CONFORMANCE_EXTENDER_SCENARIOS") or DEFAULT_EXTENDER_SCENARIOS),
        help=f"scenarios of the extender comparison, a harness of its own (default $CONFORMANCE_EXTENDER_SCENARIOS "
        f"or {DEFAULT_EXTENDER_SCENARIOS}; 0: none)",
    )
    parser.add_argument(
        "--gang-timelines",
        type=int,
        default=int(os.environ.get("CONFORMANCE_GANG_TIMELINES") or DEFAULT_GANG_TIMELINES),
        help=f"gang timelines against kube-scheduler with the workload-aware gates on, on control planes of their own "
        f"(default $CONFORMANCE_GANG_TIMELINES or {DEFAULT_GANG_TIMELINES}; 0: none)",
    )
    parser.add_argument(
        "--gang-seed-start", type=int, default=None, help="seed of the first gang timeline (default: drawn fresh)"
    )
    parser.add_argument(
        "--gang-switches",
        default=os.environ.get("CONFORMANCE_GANG_SWITCHES") or ",".join(FEATURES),
        help=f"comma-separated timeline features beyond gangs: {', '.join(FEATURES)} (default "
        f"$CONFORMANCE_GANG_SWITCHES or all of them, {','.join(FEATURES)}; 'none': plain gangs only)",
    )
    parser.add_argument("--gang-only", action="store_true", help="only the gang timelines (the page keeps the rest)")
    parser.add_argument(
        "--big-clusters",
        type=int,
        default=int(os.environ.get("CONFORMANCE_BIG_CLUSTERS") or DEFAULT_BIG_CLUSTERS),
        help=f"big-cluster scenarios (1000-5000 nodes, sampling compared exactly) on a control plane of their own "
        f"(default $CONFORMANCE_BIG_CLUSTERS or {DEFAULT_BIG_CLUSTERS}; 0: none)",
    )
    parser.add_argument(
        "--big-seed-start", type=int, default=None, help="seed of the first big-cluster scenario (default: fresh)"
    )
    parser.add_argument("--big-only", action="store_true", help="only the big clusters (the page keeps the rest)")
    timeline_run.add_arguments(parser)
    args = parser.parse_args(argv)
    command = "python -m tests.conformance " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    args.seeds_fresh = args.seed_start is None
    if args.seed_start is None:
        args.seed_start = fresh_seed()
        print(f"seeds start at {args.seed_start} (drawn fresh; rerun this range with --seed-start {args.seed_start})")
    failed = run_parts(args, parser, command.strip())
    if not args.no_write:
        parts_report.refresh(args.json.parent, args.doc)
        print(f"wrote the table of the suite's parts in {args.doc}")
    return failed


def run_parts(args: argparse.Namespace, parser: argparse.ArgumentParser, command: str) -> int:
    """The parts the arguments ask for (one ``--*-only`` part, or all of them); nonzero if one disagreed."""
    if args.extender_only:
        return run_extender_scenarios(args, command)
    if args.gang_only:
        return run_gang_timelines(args, command)
    if args.big_only:
        return run_big_clusters(args, command)
    if args.timelines_only:
        return timeline_run.run_default_timelines(args, command)
    # The generated sections of the other comparisons, read before the scenario report rewrites the page.
    kept_timelines = timeline_report.current_section(args.doc)
    kept_gangs = gang_report.current_section(args.doc)
    kept_big = big_report.current_section(args.doc)
    kept_section = validation_report.current_section(args.doc)
    extender_section = extender_harness.current_section(args.doc)
    failed = 0 if args.validation_only else run_scenarios(args, parser, command)
    if not args.validation_only and args.extender_scenarios > 0:
        failed |= run_extender_scenarios(args, command)
    elif extender_section is not None and not args.no_write:
        extender_harness.put_section(extender_section, args.doc)  # the scenario report rewrote the page
    if args.validation_specs > 0:
        failed |= run_validation(args, command)
    elif kept_section is not None and not args.no_write:
        validation_report.put_section(kept_section, args.doc)  # the scenario report rewrote the page
    if not args.validation_only and args.gang_timelines > 0:
        failed |= run_gang_timelines(args, command)
    elif kept_gangs is not None and not args.no_write:
        gang_report.put_section(kept_gangs, args.doc)  # the scenario report rewrote the page
    if not args.validation_only and args.big_clusters > 0:
        failed |= run_big_clusters(args, command)
    elif kept_big is not None and not args.no_write:
        big_report.put_section(kept_big, args.doc)  # the scenario report rewrote the page
    if not args.validation_only and args.timelines > 0:
        failed |= timeline_run.run_default_timelines(args, command)
    elif kept_timelines is not None and not args.no_write:
        timeline_report.put_section(kept_timelines, args.doc)  # the scenario report rewrote the page
    return failed


def run_big_clusters(args: argparse.Namespace, command: str) -> int:
    """Scenarios of 1000-5000 nodes, sampling and rotation compared exactly (big_clusters.py)."""
    profiles = [DEFAULT_PROFILE, big_report.SAMPLING_PROFILE]
    seed_start = args.big_seed_start if args.big_seed_start is not None else random.SystemRandom().randrange(10**6)
    print(f"big clusters: seeds {seed_start}..{seed_start + args.big_clusters - 1}", flush=True)
    work_dir = (args.work_dir or Path(".cluster") / "conformance") / "big"
    started_at = now_utc()
    started = time.monotonic()
    rows = []
    with Harness(profiles, work_dir=work_dir.resolve(), log=lambda text: print(text, flush=True)) as harness:
        for i in range(args.big_clusters):
            seed = seed_start + i
            profile = profiles[i % len(profiles)]
            result = harness.run_scenario(generate_big(seed, big_size_for(i)), profile.name)
            rows.append(big_report.scenario_row(result, profile))
            agree = sum(p.agree for p in result.pods)
            print(f"big cluster {i + 1}/{args.big_clusters}: seed {seed} ({result.nodes} nodes) {profile.name}: "
                  f"{agree}/{len(result.pods)} agree in {result.seconds:.1f}s", flush=True)  # fmt: skip
    run = RunInfo.collect(
        command=command, seed_start=seed_start, sizes="big", seconds=time.monotonic() - started, started=started_at,
        seeds_fresh=args.big_seed_start is None,
    )  # fmt: skip
    data = big_report.summary(rows, vars(run))
    if not args.no_write:
        path = big_report.write_json(data, args.json)
        big_report.put_section(big_report.section(data), args.doc)
        print(f"wrote {path} and the big-cluster section of {args.doc}")
    print(f"big clusters: {data['scenarios']} scenarios, {data['pods']} pods, {data['agree']} agree, "
          f"{data['sampled']} samples compared")  # fmt: skip
    return 1 if data["disagree"] else 0


def run_gang_timelines(args: argparse.Namespace, command: str) -> int:
    """Workload-aware profiles against kube-scheduler with the four gates on: the timelines of fresh seeds."""
    profiles = workload_aware_profiles()
    if not profiles:
        print("gang timelines: no workload-aware profile in examples/, nothing to compare")
        return 1
    switches = [s.strip() for s in args.gang_switches.split(",") if s.strip() and s.strip() != "none"]
    seed_start = args.gang_seed_start if args.gang_seed_start is not None else random.SystemRandom().randrange(10**6)
    print(f"gang timelines: seeds {seed_start}..{seed_start + args.gang_timelines - 1}, switches {switches or 'none'}")
    work_dir = (args.work_dir or Path(".cluster") / "conformance") / "gangs"
    started_at = now_utc()
    started = time.monotonic()
    results: list[TimelineResult] = []
    log = lambda text: print(text, flush=True)  # noqa: E731
    with TimelineHarness(profiles, work_dir=work_dir.resolve(), log=log) as harness:
        for i in range(args.gang_timelines):
            seed = seed_start + i
            profile = profiles[seed % len(profiles)]
            result = harness.run_timeline(generate_timeline(seed, profile.name, switches))
            results.append(result)
            verdict = "agree" if result.agree else "DISAGREE"
            tie = f", diverged on a tie at step {result.diverged_on_tie}" if result.diverged_on_tie is not None else ""
            print(f"gang timeline {i + 1}/{args.gang_timelines}: seed {seed} {profile.name}: {verdict} "
                  f"({len(result.steps)} steps{tie}) in {result.seconds}s", flush=True)  # fmt: skip
            for step in result.steps:
                for problem in step.problems:
                    print(f"  step {step.index} ({step.label}): {problem}", flush=True)
            if result.error:
                print(f"  harness error: {result.error}", flush=True)
    run = RunInfo.collect(
        command=command, seed_start=seed_start, sizes="-", seconds=time.monotonic() - started, started=started_at,
        seeds_fresh=args.gang_seed_start is None,
    )  # fmt: skip
    data = {**gang_summary(results), "switches": switches, "run": vars(run)}
    if not args.no_write:
        gang_report.write_json(data, results, args.json.parent / gang_report.GANG_JSON_PATH.name)
        gang_report.put_section(gang_report.section(data, results), args.doc)
        print(f"wrote {gang_report.GANG_JSON_PATH} and the gang section of {args.doc}")
    print(
        f"gang timelines: {data['timelines']} timelines, {data['agree']} agree, {data['disagree']} disagree, "
        f"{data['diverged_on_tie']} diverged on a tie; steps with pending-feature differences {data['steps_pending']}"
    )
    return 1 if data["disagree"] else 0


def run_validation(args: argparse.Namespace, command: str) -> int:
    """The profile-validation comparison: seeds from --seed-start, its JSON and its section of the page."""
    started_at = now_utc()
    logging.getLogger("kopf_scheduler").setLevel(logging.ERROR)  # one "is invalid" warning per refused spec
    seeds = range(args.seed_start, args.seed_start + args.validation_specs)
    results, seconds = profile_validation.timed_run(seeds)
    data = profile_validation.summary(results, seconds)
    run = RunInfo.collect(
        command=command, seed_start=args.seed_start, sizes="-", seconds=seconds, started=started_at,
        seeds_fresh=args.seeds_fresh,
    )  # fmt: skip
    data["run"] = vars(run)
    if not args.no_write:
        validation_report.write_json(data, validation_report.JSON_PATH)
        validation_report.put_section(validation_report.section(data, run), args.doc)
        print(f"wrote {validation_report.JSON_PATH} and the validation section of {args.doc}")
    print(
        f"{data['specs']} profile specs: {data['agree']} agree, {data['disagree']} disagree; "
        f"messages {data['messages']} in {data['seconds']}s"
    )
    disagreements = [r for r in results if not r.agree or r.message == "differs"]
    for r in disagreements:
        print(f"DISAGREE validation: seed {r.case.seed} ({r.case.category}) {r.case.spec}: {r.problems}")
    return 1 if disagreements else 0


def run_scenarios(args: argparse.Namespace, parser: argparse.ArgumentParser, command: str) -> int:
    """The scheduling comparison on a local control plane (the scenarios)."""

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
            profile = profile_for(seed, profiles)
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
    run = RunInfo.collect(
        command=command,
        seed_start=args.seed_start,
        sizes=args.size,
        seconds=time.monotonic() - started,
        started=started_at,
        seeds_fresh=args.seeds_fresh,
    )
    data = summary(results, profiles, run)
    data["default_profile_share"] = DEFAULT_PROFILE_SHARE
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
        for side, texts in item.get("texts", {}).items():
            print(f"  {side}: note={texts['note']!r} condition={texts['condition']!r}")
    for seed, profile in sorted({(item["seed"], item["profile"]) for item in unexplained}):
        size = size_for(seed, args.size)
        rerun = f"--seed-start {seed} --scenarios 1 --profiles {profile} --size {size}"
        pin = f"({seed}, {size!r}, {profile!r})"
        print(f"  rerun: python -m tests.conformance {rerun}; once fixed, pin {pin} in test_quick.QUICK_SCENARIOS")
    return 1 if unexplained else 0


def run_extender_scenarios(args: argparse.Namespace, command: str) -> int:
    """The extender comparison: the conformance extender configured for both, a harness of its own."""
    extender = extender_harness.ConformanceExtender().start()
    profile = ProfileDef(
        extender_harness.EXTENDER_PROFILE_NAME,
        {"extenders": [extender.config()]},
        "built-in: the default profile with the conformance extender",
    )
    work_dir = (args.work_dir or Path(".cluster") / "conformance") / "extender"
    started_at = now_utc()
    started = time.monotonic()
    results: list[ScenarioResult] = []
    try:
        with Harness([profile], work_dir=work_dir.resolve(), log=lambda text: print(text, flush=True)) as harness:
            for i in range(args.extender_scenarios):
                seed = args.seed_start + i
                size = size_for(seed, args.size)
                result = harness.run_scenario(generate(seed, size), profile.name)
                results.append(result)
                agree = sum(p.agree for p in result.pods)
                done = f"{i + 1}/{args.extender_scenarios}"
                print(f"extender scenario {done}: seed {seed}: {agree}/{len(result.pods)} agree", flush=True)
    finally:
        extender.stop()
    annotate_known(results)
    run = RunInfo.collect(
        command=command, seed_start=args.seed_start, sizes=args.size, seconds=time.monotonic() - started,
        started=started_at, seeds_fresh=args.seeds_fresh,
    )  # fmt: skip
    data = summary(results, [profile], run)
    if not args.no_write:
        write_json(data, args.json.parent / EXTENDER_JSON_PATH.name)
        extender_harness.put_section(extender_harness.section(data, extender.calls), args.doc)
        print(f"wrote {EXTENDER_JSON_PATH} and the extender section of {args.doc}")
    print(f"extenders: {data['pods']} pods, {data['agree']} agree, {data['disagree']} disagree; calls {extender.calls}")
    unexplained = [d for d in data["disagreements"] if not d["known"]]
    for item in unexplained:
        print(f"UNEXPLAINED (extender): seed {item['seed']} {item['pod']}: {item['problems']}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
