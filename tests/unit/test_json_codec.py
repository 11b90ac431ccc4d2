"""json_codec: compact UTF-8 JSON through orjson, with the standard library for what orjson refuses."""

from __future__ import annotations

import json

import pytest

from kopf_scheduler import json_codec


def test_an_api_object_encodes_compactly_and_round_trips() -> None:
    pod = {"metadata": {"name": "p-é", "labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}, "n": 1.5}
    encoded = json_codec.dumps(pod)
    assert encoded == json.dumps(pod, separators=(",", ":"), ensure_ascii=False).encode()
    assert json_codec.loads(encoded) == pod
    assert json_codec.loads(encoded.decode()) == pod


@pytest.mark.parametrize("value", [{1: "a"}, {"big": 2**70}, [-(2**70)]])
def test_what_orjson_refuses_goes_through_the_standard_library(value: object) -> None:
    encoded = json_codec.dumps(value)
    assert encoded == json.dumps(value, separators=(",", ":")).encode()
    assert json_codec.loads(encoded) == json.loads(encoded)


def test_without_orjson_the_same_bytes_come_out(monkeypatch: pytest.MonkeyPatch) -> None:
    value = {"kind": "Binding", "target": {"name": "nöde"}}
    with_orjson = json_codec.dumps(value)
    monkeypatch.setattr(json_codec, "orjson", None)
    assert json_codec.dumps(value) == with_orjson
    assert json_codec.loads(with_orjson) == value


def test_text_that_is_not_json_is_a_value_error() -> None:
    with pytest.raises(json.JSONDecodeError, match="Expecting property name"):
        json_codec.loads(b"{not json")


def test_what_no_json_can_hold_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        json_codec.dumps({"x": object()})
