"""The page's table of the suite's parts is generated from the recorded files: every part, its commit, seeds,
duration and verdict, and a suite that lacks a part or has a disagreement never reads as passing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conformance import parts_report

RUN = {"commit": "abc1234", "started": "2026-11-28 19:00 UTC", "seconds": 125.0}


def _record(results: Path, name: str, data: dict[str, Any]) -> None:
    (results / name).write_text(json.dumps(data))


def _all_parts(results: Path, *, gang_disagree: int = 0) -> None:
    pods = {"scenarios": 3, "pods": 9, "agree": 9, "disagree": 0}
    _record(results, "conformance.json", {**pods, "run": {**RUN, "seeds": "10..12"}})
    _record(results, "conformance-extenders.json", {**pods, "run": {**RUN, "seeds": "20..22"}})
    _record(
        results, "profile-validation.json", {"specs": 4, "agree": 4, "disagree": 0, "run": {**RUN, "seed_start": 10}}
    )
    timelines = {"timelines": 5, "agree": 5, "disagree": 0, "errors": 0, "steps": 30, "diverged_on_tie": 1}
    _record(results, "conformance-timelines.json", {**timelines, "seeds": [40, 41, 42, 43, 44], "run": RUN})
    gangs = {**timelines, "agree": 5 - gang_disagree, "disagree": gang_disagree, "agree_on_replay": 1}
    _record(results, "conformance-gangs.json", {**gangs, "seeds": [50, 51, 52, 53, 54], "run": RUN})
    big = {**pods, "scenarios_1000_plus": 3, "sampled": 7, "run": {**RUN, "seed_start": 60}}
    _record(results, "conformance-big-clusters.json", big)


def test_every_part_is_a_row_and_the_totals_follow(tmp_path: Path) -> None:
    _all_parts(tmp_path)
    text = parts_report.section(tmp_path)
    assert text.startswith(parts_report.SECTION_START)
    assert text.endswith(parts_report.SECTION_END)
    assert (
        "| scenarios | `abc1234` | 10..12 | 2026-11-28 19:00 UTC | 2 min 05 s | 9/9 pods agree in 3 scenarios | yes |"
        in text
    )
    assert "| profile validation | `abc1234` | 10..13 |" in text
    assert "| gang timelines | `abc1234` | 50..54 |" in text
    assert "5/5 timelines agree (1 after an upstream replay), 30 steps, 1 cut short by a tie" in text
    assert "| big clusters | `abc1234` | 60..62 |" in text
    assert "In all: 10 multi-step scenarios (timelines), 3 scenarios of ≥ 1000 nodes; every part agrees" in text


def test_a_disagreement_or_a_missing_part_is_not_a_pass(tmp_path: Path) -> None:
    _all_parts(tmp_path, gang_disagree=1)
    text = parts_report.section(tmp_path)
    assert "4/5 timelines agree" in text
    assert "| **no** |" in text
    assert "not every part agrees" in text
    _all_parts(tmp_path)
    (tmp_path / "conformance-big-clusters.json").unlink()
    text = parts_report.section(tmp_path)
    assert "| big clusters | not recorded |" in text
    assert "not every part agrees" in text


def test_refresh_replaces_the_table_in_place(tmp_path: Path) -> None:
    _all_parts(tmp_path)
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\n{parts_report.SECTION_START}\nold\n{parts_report.SECTION_END}\n\n## Rest\n")
    parts_report.refresh(tmp_path, page)
    text = page.read_text()
    assert text.startswith("# Title\n\n" + parts_report.SECTION_START)
    assert "old" not in text
    assert text.count(parts_report.SECTION_START) == 1
    assert text.rstrip().endswith("## Rest")
