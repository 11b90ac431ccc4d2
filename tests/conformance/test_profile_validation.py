"""The quick subset of the profile-validation comparison that ``make test`` runs (~20 s on 2 cores).

A fixed range of generated SchedulerProfile specs goes to upstream kube-scheduler v1.36.3 (start-up only,
see profile_validation.py) and through our operator's path; any accept/reject disagreement fails (none is
excused in advance). Without the kube-scheduler binary the tests fail, as test_quick.py's do: ``make
test`` builds it first, so its absence is a broken setup, not a reason to skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.profile_specs import SpecCase
from tests.conformance.profile_validation import Comparison, compare, run, run_ours, run_upstream

pytestmark = pytest.mark.e2e

QUICK_SEEDS = range(1, 41)


def _describe(results: list[Comparison]) -> str:
    return "\n".join(f"seed {r.case.seed} ({r.case.category}) {r.case.spec}: {r.problems}" for r in results)


def test_quick_specs_agree_with_upstream(tmp_path: Path) -> None:
    results = run(QUICK_SEEDS, tmp_path)
    # Both verdicts must be well represented, or agreement would prove little.
    assert sum(r.upstream.accepted for r in results) >= 8
    assert sum(not r.upstream.accepted for r in results) >= 15
    assert len({r.case.category for r in results}) >= 10
    disagreements = [r for r in results if not r.agree]
    assert not disagreements, "profile validation disagrees with upstream kube-scheduler:\n" + _describe(disagreements)
    differs = [r for r in results if r.message == "differs"]
    assert not differs, "messages meant to be upstream's are not:\n" + _describe(differs)


def _both(spec: dict, tmp_path: Path) -> Comparison:
    case = SpecCase(0, "pinned", spec)
    return compare(case, run_upstream([case], tmp_path)[0], run_ours(case))


def test_oracle_refuses_what_it_must(tmp_path: Path) -> None:
    # A negative control: the start-up check really validates args (an always-accepting oracle would pass
    # the agreement test whenever we accept too).
    result = _both({"pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 101}}]}, tmp_path)
    assert not result.upstream.accepted
    assert "profiles[0].pluginConfig[0].args.hardPodAffinityWeight: Invalid value: 101" in result.upstream.message
    assert result.agree
    assert result.message == "match", result.problems


BAD_FIT = {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Nope"}}}


@pytest.mark.parametrize(
    ("spec", "accepted"),
    [
        pytest.param(
            {"plugins": {"multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]}}, "pluginConfig": [BAD_FIT]},
            True,
            id="fit-args-of-a-disabled-fit-are-not-judged",
        ),
        pytest.param(
            {"plugins": {"filter": {"disabled": [{"name": "NodeResourcesFit"}]}}, "pluginConfig": [BAD_FIT]},
            False,
            id="fit-args-of-a-fit-still-needed-are-judged",
        ),
        pytest.param(
            {
                "plugins": {"multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]}},
                "pluginConfig": [{"name": "NodeResourcesFit", "args": {"bogus": 1}}],
            },
            False,
            id="fit-args-of-a-disabled-fit-are-still-decoded",
        ),
        pytest.param({"plugins": {"multiPoint": {"disabled": [{"name": ""}]}}}, True, id="empty-name-disabled"),
        pytest.param({"pluginConfig": [{"name": "", "args": {}}]}, True, id="empty-name-plugin-config"),
        pytest.param({"pluginConfig": [{"name": ""}, {"name": ""}]}, False, id="empty-name-plugin-config-twice"),
        pytest.param({"plugins": {"filter": {"enabled": [{"name": ""}]}}}, False, id="empty-name-enabled"),
    ],
)
def test_former_deliberate_differences_are_gone(spec: dict, accepted: bool, tmp_path: Path) -> None:
    # Once excused in advance (issue 37): NodeResourcesFit args when the plugin is disabled, empty plugin names.
    result = _both(spec, tmp_path)
    assert (result.upstream.accepted, result.ours.accepted) == (accepted, accepted), result.problems
    assert result.message in ("match", "deliberate", "n/a"), result.problems


@pytest.mark.parametrize(
    ("spec", "accepted"),
    [
        pytest.param(
            {
                "plugins": {
                    "multiPoint": {
                        "enabled": [
                            {"name": "GangScheduling"},
                            {"name": "TopologyPlacementGenerator"},
                            {"name": "PodGroupPodsCount", "weight": 2},
                        ]
                    }
                }
            },
            True,
            id="placement-plugins-through-multi-point",
        ),
        pytest.param(
            # Upstream's NodeResourcesFit is a PlacementScore plugin (v1.36.3, any gate): accepted there.
            {"plugins": {"placementScore": {"enabled": [{"name": "NodeResourcesFit", "weight": 3}]}}},
            True,
            id="node-resources-fit-at-placement-score",
        ),
        pytest.param(
            {"plugins": {"placementScore": {"enabled": [{"name": "ImageLocality"}]}}},
            False,
            id="a-score-plugin-at-placement-score",
        ),
        pytest.param(
            {"plugins": {"placementGenerate": {"enabled": [{"name": "PodGroupPodsCount"}]}}},
            False,
            id="a-placement-scorer-at-placement-generate",
        ),
    ],
)
def test_placement_points_agree_with_upstream(spec: dict, accepted: bool, tmp_path: Path) -> None:
    # v1.36's placement extension points (issue 35): once an unknown field for us, now upstream's verdict and text.
    result = _both(spec, tmp_path)
    assert (result.upstream.accepted, result.ours.accepted) == (accepted, accepted)
    if not accepted:
        assert result.message == "match", result.problems
