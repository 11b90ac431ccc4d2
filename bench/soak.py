"""Soak run (issue 39, ``make soak``): the fault scenarios and the frozen-replica scenarios, longer and bigger than
``make test`` runs them, and the hypothesis fuzz tests with many more examples; writes ``bench/results/soak.json``.

Sizes (environment variables; the defaults are a soak of 46 minutes on 2 CPUs, measured 2026-11-28):

- ``SOAK_ROUNDS`` (default 5): how many times each e2e file runs, each round on a fresh local control plane;
- ``SOAK_SCALE`` (default 3): the e2e tests' ``KOPF_SCHEDULER_SOAK_SCALE``, a multiplier of their nodes and bursts
  (``tests/e2e/soak.py``; ``make test`` runs them at 1);
- ``SOAK_FUZZ_EXAMPLES`` (default 2000): examples per fuzz test (``tests/unit/fuzz/conftest.py``'s ``soak`` profile,
  random seeds; ``make test`` runs ``ci``, 40 derandomized).

Each part is plain pytest: the fault scenarios write their outcomes (``KOPF_SCHEDULER_FAULTS_RECORD``), the
frozen-replica tests their figures (junit ``record_property``). The record sums what the issue's acceptance counts
(pods lost, double bindings, nodes over-committed: all must be 0) and says which part failed, if one did; the exit
status is pytest's worst.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench._machine_lock import refuse_if_busy
from bench.e2e import REPO_ROOT, RESULTS_DIR, load1, machine_facts

FAULTS = "tests/e2e/test_operator_faults.py"
FROZEN = "tests/e2e/test_operator_frozen_replica.py"
FUZZ = "tests/unit/fuzz"
RESULT = RESULTS_DIR / "soak.json"


@dataclass
class Part:
    """One pytest run of the soak."""

    what: str
    round: int
    passed: bool
    exit_status: int
    duration_s: float
    load1_before: float
    tests: int = 0
    failures: list[str] = field(default_factory=list)
    figures: list[dict[str, Any]] = field(default_factory=list)


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def run_pytest(what: str, soak_round: int, args: list[str], env: dict[str, str], work: Path) -> tuple[Part, Path]:
    """Run pytest on ``args``; its junit file is returned beside the part."""
    junit = work / f"{what}-{soak_round}.xml"
    started, load = time.monotonic(), load1()
    # xunit1: the junit family that keeps record_property's values (the frozen-replica figures).
    options = ["-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1", f"--junitxml={junit}"]
    command = [sys.executable, "-m", "pytest", *options, *args]
    print(f"soak: {what} round {soak_round}: pytest {' '.join(args)}", flush=True)
    status = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, **env}, check=False).returncode
    part = Part(what, soak_round, status == 0, status, round(time.monotonic() - started, 1), round(load, 2))
    part.tests, part.failures = _junit_outcome(junit)
    return part, junit


def _junit_outcome(junit: Path) -> tuple[int, list[str]]:
    if not junit.exists():
        return 0, ["no junit report (pytest did not run)"]
    cases = ET.parse(junit).getroot().iter("testcase")
    tests, failures = 0, []
    for case in cases:
        tests += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failures.append(f"{case.get('classname')}::{case.get('name')}")
    return tests, failures


def junit_properties(junit: Path) -> list[dict[str, Any]]:
    """Each test's ``record_property`` values (the frozen-replica figures), with its name."""
    if not junit.exists():
        return []
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        props = {p.get("name"): _number(p.get("value")) for p in case.iter("property")}
        if props:
            rows.append({"test": case.get("name"), **props})
    return rows


def _number(value: str | None) -> Any:
    try:
        return json.loads(value or "null")
    except ValueError:
        return value


def totals(parts: list[Part]) -> dict[str, int]:
    """What the issue's acceptance counts, summed over every scenario of every round."""
    sums = {"pods_lost": 0, "double_bindings": 0, "nodes_overcommitted": 0, "stale_binds": 0, "scenarios": 0}
    for part in parts:
        for row in part.figures:
            sums["scenarios"] += 1
            sums["pods_lost"] += int(row.get("pods_lost") or 0)
            sums["double_bindings"] += int(row.get("double_bindings") or 0)
            sums["nodes_overcommitted"] += int(row.get("nodes_overcommitted") or 0)
            sums["stale_binds"] += int(row.get("stale_binds") or 0)
    return sums


def main() -> int:
    rounds, scale = _env_int("SOAK_ROUNDS", 5), _env_int("SOAK_SCALE", 3)
    examples = _env_int("SOAK_FUZZ_EXAMPLES", 2000)
    facts = machine_facts()
    started = time.monotonic()
    parts: list[Part] = []
    with refuse_if_busy("bench.soak"), tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        work = Path(tmp)
        e2e_env = {"KOPF_SCHEDULER_SOAK_SCALE": str(scale)}
        for soak_round in range(1, rounds + 1):
            record = work / f"faults-{soak_round}.json"
            faults_env = {**e2e_env, "KOPF_SCHEDULER_FAULTS_RECORD": str(record)}
            part, _ = run_pytest("faults", soak_round, [FAULTS], faults_env, work)
            if record.exists():
                part.figures = json.loads(record.read_text())["scenarios"]
            parts.append(part)
            part, junit = run_pytest("frozen", soak_round, [FROZEN], e2e_env, work)
            part.figures = junit_properties(junit)
            parts.append(part)
        fuzz_env = {"KOPF_SCHEDULER_FUZZ": "soak", "KOPF_SCHEDULER_FUZZ_EXAMPLES": str(examples)}
        parts.append(run_pytest("fuzz", 1, [FUZZ], fuzz_env, work)[0])
    record = {
        "what": "make soak (bench/soak.py): fault scenarios, frozen and cut-off replicas, fuzzing, longer (issue 39)",
        "machine": facts,
        "sizes": {"rounds": rounds, "scale": scale, "fuzz_examples_per_test": examples},
        "duration_s": round(time.monotonic() - started, 1),
        "passed": all(part.passed for part in parts),
        "totals": totals(parts),
        "parts": [asdict(part) for part in parts],
    }
    RESULT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"soak: {RESULT.relative_to(REPO_ROOT)}: passed={record['passed']} totals={record['totals']}")
    return max((part.exit_status for part in parts), default=0)


if __name__ == "__main__":
    raise SystemExit(main())
