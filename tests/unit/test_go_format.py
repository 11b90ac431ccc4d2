"""Go's formatting of durations, quoted strings and string lists, as upstream's messages print them."""

from __future__ import annotations

import pytest

from kopf_scheduler.go_format import go_duration, go_quote, go_string_list


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (10, "10s"), (90, "1m30s"), (1.5, "1.5s"), (0.25, "250ms"), (3600, "1h0m0s"), (900, "15m0s")],
)
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("NodeAffinity", '"NodeAffinity"'),
        ('say "hi"', r'"say \"hi\""'),
        ("back\\slash", r'"back\\slash"'),
        ("two\nlines", r'"two\nlines"'),
        ("héllo", '"héllo"'),
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


def test_go_string_list_is_sorted_and_space_separated() -> None:
    assert go_string_list({"PodTopologySpread", "NodeAffinity"}) == "[NodeAffinity PodTopologySpread]"
    assert go_string_list([]) == "[]"
