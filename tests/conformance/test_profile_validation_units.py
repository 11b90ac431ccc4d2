"""The profile-validation harness without kube-scheduler: generator, our verdicts, parsing and comparison."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conformance.profile_specs import CATEGORIES, OMITTED_DEFAULTS, SpecCase, generate_spec
from tests.conformance.profile_validation import (
    Verdict,
    compare,
    core_message,
    run_ours,
    upstream_config,
    upstream_error,
)
from tests.conformance.validation_report import END, START, current_section, put_section


def test_specs_are_a_function_of_the_seed_and_cover_every_category() -> None:
    assert [generate_spec(s) for s in range(1, 50)] == [generate_spec(s) for s in range(1, 50)]
    cases = [generate_spec(s) for s in range(1, 301)]
    assert {c.category for c in cases} == {name for name, _, _ in CATEGORIES}
    json.dumps([c.spec for c in cases])  # plain JSON, as both sides read it
    assert not hasattr(cases[0], "deliberate")  # no spec is excused in advance (issue 37)


def test_upstream_config_names_the_profile_and_disables_what_we_lack(tmp_path: Path) -> None:
    case = SpecCase(7, "t", {"plugins": {"multiPoint": {"disabled": [{"name": "VolumeBinding"}]}}})
    config = upstream_config(case, tmp_path / "kubeconfig")
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "validate-7"
    disabled = [e["name"] for e in profile["plugins"]["multiPoint"]["disabled"]]
    # The user's own entry only: kopf-scheduler omits no default (OMITTED_DEFAULTS is empty).
    assert OMITTED_DEFAULTS == ()
    assert disabled == ["VolumeBinding"]
    assert config["leaderElection"] == {"leaderElect": False}
    assert case.spec["plugins"]["multiPoint"]["disabled"] == [{"name": "VolumeBinding"}]  # not mutated


def test_upstream_error_is_read_from_the_command_failed_line() -> None:
    stderr = (
        'I1123 19:40:00.000000    1 flags.go:64] FLAG: --v="0"\n'
        'E1123 19:40:00.100000    1 run.go:72] "command failed" err="initializing profiles: creating profile for '
        'scheduler name validate-3: plugin \\"NodeName\\" does not extend ScorePlugin plugin"\n'
    )
    message = core_message(upstream_error(stderr))
    assert message == 'plugin "NodeName" does not extend ScorePlugin plugin'
    assert upstream_error("Error: unknown flag: --nope\n") == "unknown flag: --nope"


def test_our_verdict_names_the_layer_that_refused() -> None:
    def ours(spec: dict) -> Verdict:
        return run_ours(SpecCase(1, "t", spec))

    assert ours({}).accepted
    assert ours({"percentageOfNodesToScore": 101}).layer == "crd-schema"
    assert ours({"plugins": {"nonsense": {}}}).layer == "pydantic"
    bad_args = ours({"pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": -1}}]})
    assert bad_args.layer == "builder"
    assert bad_args.errors == (
        "pluginConfig[0].args.hardPodAffinityWeight: Invalid value: -1: not in valid range [0, 100]",
    )


def test_messages_compare_with_upstreams_field_path_or_without() -> None:
    case = SpecCase(1, "t", {})
    ours = Verdict(False, "builder", "", ("pluginConfig[0].args.x: Invalid value: 1: no",))
    same = compare(case, Verdict(False, "upstream", "profiles[0].pluginConfig[0].args.x: Invalid value: 1: no"), ours)
    assert same.agree
    assert same.message == "match"
    other = compare(case, Verdict(False, "upstream", "profiles[0].pluginConfig[0].args.x: Invalid value: 1: yes"), ours)
    assert other.message == "differs"
    assert other.problems
    framework = Verdict(
        False, "builder", "", ('plugins.filter.enabled[0]: plugin "A" does not extend FilterPlugin plugin',)
    )
    bare = compare(case, Verdict(False, "upstream", 'plugin "A" does not extend FilterPlugin plugin'), framework)
    assert bare.message == "match"
    disagreement = compare(case, Verdict(True), ours)
    assert not disagreement.agree
    assert disagreement.problems


def test_the_section_is_replaced_in_place_or_appended(tmp_path: Path) -> None:
    doc = tmp_path / "c.md"
    doc.write_text("# page\n")
    assert current_section(doc) is None
    put_section(f"{START}\none\n{END}", doc)
    put_section(f"{START}\ntwo\n{END}", doc)
    assert doc.read_text() == f"# page\n\n{START}\ntwo\n{END}\n"
    assert current_section(doc) == f"{START}\ntwo\n{END}"
