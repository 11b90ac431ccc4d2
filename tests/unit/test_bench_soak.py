"""bench/soak.py's reading of pytest's junit reports and its sums (the soak run itself is e2e: ``make soak``)."""

from __future__ import annotations

from pathlib import Path

from bench.soak import Part, _junit_outcome, junit_properties, totals

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="2">
<testcase classname="tests.e2e.test_operator_frozen_replica" name="test_frozen">
<properties><property name="takeover_s" value="16.9"/><property name="pods_lost" value="0"/>
<property name="double_bindings" value="1"/><property name="stale_binds" value="2"/></properties></testcase>
<testcase classname="tests.e2e.test_operator_frozen_replica" name="test_cut"><failure message="boom"/></testcase>
</testsuite></testsuites>
"""


def test_junit_outcome_and_properties(tmp_path: Path) -> None:
    junit = tmp_path / "frozen.xml"
    junit.write_text(JUNIT)
    assert _junit_outcome(junit) == (2, ["tests.e2e.test_operator_frozen_replica::test_cut"])
    assert junit_properties(junit) == [
        {"test": "test_frozen", "takeover_s": 16.9, "pods_lost": 0, "double_bindings": 1, "stale_binds": 2}
    ]
    assert _junit_outcome(tmp_path / "missing.xml") == (0, ["no junit report (pytest did not run)"])


def test_totals_sum_every_scenario_of_every_part() -> None:
    faults = Part("faults", 1, True, 0, 1.0, 0.5, figures=[{"pods_lost": 0, "nodes_overcommitted": 1}] * 2)
    frozen = Part("frozen", 1, False, 1, 1.0, 0.5, figures=[{"double_bindings": 1, "stale_binds": 3}])
    assert totals([faults, frozen]) == {
        "pods_lost": 0,
        "double_bindings": 1,
        "nodes_overcommitted": 2,
        "stale_binds": 3,
        "scenarios": 3,
    }
