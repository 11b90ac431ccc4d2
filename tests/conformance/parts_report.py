"""The page's table of the whole suite, part by part: which commit, which seeds, how long, what agreed.

Why: the full conformance run is split into parts that run separately (each under an hour on two cores: the
scenarios with extenders and profile validation, the default-profile timelines, the gang timelines, the big
clusters), and each part rewrites only its own section of docs/conformance.md. A reader must still see at a
glance whether the whole suite passed at one commit, on which seeds and in how long (issue 37: "the page says
which commit, which seeds, how long"). This table is generated from the recorded JSON files of every part
(``bench/results/conformance*.json``, ``profile-validation.json``) after any part runs; nothing in it is typed by
hand.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conformance import page_sections

REPO_ROOT = Path(__file__).resolve().parents[2]
#: What a commit of the suite must share with the others for the parts to judge the same scheduler.
SCHEDULER_PATHS = ("operator", "pyproject.toml")

SECTION_START = "<!-- suite-parts:start -->"
SECTION_END = "<!-- suite-parts:end -->"

JSON = Mapping[str, Any]


@dataclass(frozen=True)
class Part:
    name: str
    file: str
    #: The part's seeds as the page gives them ("first..last").
    seeds: Callable[[JSON], str]
    #: What agreed, in the part's own unit (pods, specs, timelines).
    result: Callable[[JSON], str]


def _seed_range(data: JSON) -> str:
    seeds = data.get("seeds") or []
    return f"{seeds[0]}..{seeds[-1]}" if seeds else "-"


def _run_seeds(data: JSON) -> str:
    return str((data.get("run") or {}).get("seeds") or "-")


def _seeds_from_start(count_key: str) -> Callable[[JSON], str]:
    """The seeds of a part that records its first seed and how many items (``count_key``) it ran."""

    def seeds(data: JSON) -> str:
        start = (data.get("run") or {}).get("seed_start")
        count = int(data.get(count_key) or 0)
        return f"{start}..{int(start) + count - 1}" if start is not None and count else "-"

    return seeds


def _pods(data: JSON) -> str:
    return f"{data.get('agree')}/{data.get('pods')} pods agree in {data.get('scenarios')} scenarios"


def _timelines(data: JSON) -> str:
    replayed = int(data.get("agree_on_replay") or 0)
    extra = f" ({replayed} after an upstream replay)" if replayed else ""
    return (
        f"{data.get('agree')}/{data.get('timelines')} timelines agree{extra}, {data.get('steps')} steps, "
        f"{data.get('diverged_on_tie')} cut short by a tie"
    )


def _big(data: JSON) -> str:
    return f"{_pods(data)} ({data.get('scenarios_1000_plus')} of ≥ 1000 nodes, {data.get('sampled')} sampled cycles)"


def _all_agree(data: JSON) -> bool:
    return not data.get("disagree") and not data.get("errors")


#: The parts whose scenarios are multi-step (timelines).
TIMELINE_PARTS = ("default-profile timelines", "gang timelines")

PARTS = (
    Part("scenarios", "conformance.json", _run_seeds, _pods),
    Part("extenders", "conformance-extenders.json", _run_seeds, _pods),
    Part(
        "profile validation",
        "profile-validation.json",
        _seeds_from_start("specs"),
        lambda d: f"{d.get('agree')}/{d.get('specs')} specs judged alike",
    ),
    Part("default-profile timelines", "conformance-timelines.json", _seed_range, _timelines),
    Part("gang timelines", "conformance-gangs.json", _seed_range, _timelines),
    Part("big clusters", "conformance-big-clusters.json", _seeds_from_start("scenarios"), _big),
)


def _load(results_dir: Path, part: Part) -> JSON | None:
    path = results_dir / part.file
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, Mapping) else None


def _minutes(seconds: Any) -> str:
    total = round(float(seconds or 0))
    return f"{total // 60} min {total % 60:02d} s"


def _started(run: JSON) -> str:
    return str(run.get("started") or run.get("date") or "?")


def section(results_dir: Path) -> str:
    """The table of every recorded part (a part never run is listed as such) and the suite's totals."""
    rows: list[str] = []
    commits: set[str] = set()
    passed = True
    loaded: dict[str, JSON] = {}
    for part in PARTS:
        data = _load(results_dir, part)
        if data is None:
            rows.append(f"| {part.name} | not recorded | | | | | |")
            passed = False
            continue
        loaded[part.name] = data
        run = data.get("run") or {}
        commits.add(str(run.get("commit") or "?"))
        ok = _all_agree(data)
        passed &= ok
        rows.append(
            f"| {part.name} | `{run.get('commit', '?')}` | {part.seeds(data)} | {_started(run)} | "
            f"{_minutes(run.get('seconds'))} | {part.result(data)} | {'yes' if ok else '**no**'} |"
        )
    multi_step = sum(int(loaded.get(n, {}).get("timelines") or 0) for n in TIMELINE_PARTS)
    big = int(loaded.get("big clusters", {}).get("scenarios_1000_plus") or 0)
    lines = [
        SECTION_START,
        "## The whole suite, part by part",
        "",
        "Each part runs on its own (`python -m tests.conformance` and its `--*-only` options; `make conformance`",
        "runs them all) and rewrites only its section below; this table is generated from their recorded JSON",
        "files (`bench/results/`). Seeds are drawn fresh by every run unless its command gives a `--*seed-start`.",
        "",
        "| part | commit | seeds | started | took | result | all agree |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"In all: {multi_step} multi-step scenarios (timelines), {big} scenarios of ≥ 1000 nodes; "
        f"{'every part agrees' if passed else 'not every part agrees'}; "
        f"commits: {', '.join(f'`{c}`' for c in sorted(commits)) or '-'}{_same_scheduler(commits)}.",
        SECTION_END,
    ]
    return "\n".join(lines)


def _same_scheduler(commits: set[str]) -> str:
    """Whether the scheduler (``operator/``, its dependencies) is the same at every commit, as git says."""
    known = sorted(c for c in commits if c != "?")
    if len(known) < 2:
        return ""
    try:
        for other in known[1:]:
            diff = subprocess.run(
                ["git", "diff", "--quiet", known[0], other, "--", *SCHEDULER_PATHS],
                cwd=REPO_ROOT,
                capture_output=True,
                timeout=30,
                check=False,
            )
            if diff.returncode == 1:
                return f" (the scheduler, {' and '.join(SCHEDULER_PATHS)}, differs between them)"
            if diff.returncode != 0:
                return ""
    except (OSError, subprocess.SubprocessError):
        return ""
    return f" ({' and '.join(SCHEDULER_PATHS)} the same at all of them: only the harness or the records changed)"


def refresh(results_dir: Path, doc: Path) -> None:
    """Rewrite the page's table from the recorded files (after any part has written its own)."""
    page_sections.put_section(section(results_dir), doc, SECTION_START, SECTION_END)
