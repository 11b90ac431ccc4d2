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


#: Every ObjectMeta field of the Kubernetes API set, managedFields included.
_FULL_METADATA = {
    "name": "p",
    "generateName": "p-",
    "namespace": "ns",
    "selfLink": "/api/v1/namespaces/ns/pods/p",
    "uid": "u1",
    "resourceVersion": "42",
    "generation": 3,
    "creationTimestamp": "2026-11-27T01:00:00Z",
    "deletionTimestamp": "2026-11-27T02:00:00Z",
    "deletionGracePeriodSeconds": 30,
    "labels": {"app": "web"},
    "annotations": {"note": "x"},
    "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "uid": "u0", "controller": True}],
    "finalizers": ["example.com/f"],
    "managedFields": [{"manager": "m", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {}}}}],
}


def _object_list() -> bytes:
    items = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": _FULL_METADATA, "spec": {"nodeName": "n1"}, "status": {}},
        {"metadata": {"name": "q", "labels": None}, "spec": {"containers": [{"name": "c", "big": 2**40}]}},
        {"metadata": {}},
        {},
    ]
    metadata = {"resourceVersion": "42", "continue": "tok", "remainingItemCount": 7}
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items}).encode()


def _loaded_without_managed_fields(data: bytes) -> object:
    value = json.loads(data)
    for item in value["items"]:
        (item.get("metadata") or {}).pop("managedFields", None)
    return value


def test_an_object_list_is_decoded_without_managed_fields_and_nothing_else_lost() -> None:
    data = _object_list()
    decoded = json_codec.loads_object_list(data)
    assert decoded == _loaded_without_managed_fields(data)
    assert decoded["items"][0]["metadata"] == {k: v for k, v in _FULL_METADATA.items() if k != "managedFields"}
    assert "managedFields" not in json.dumps(decoded)


def test_an_object_list_without_msgspec_is_the_same_value(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _object_list()
    with_msgspec = json_codec.loads_object_list(data)
    monkeypatch.setattr(json_codec, "msgspec", None)
    assert json_codec.loads_object_list(data) == with_msgspec


@pytest.mark.parametrize(
    "body",
    [
        {"items": [{"metadata": None, "spec": {}}]},  # metadata the typed decoding refuses
        {"items": [{"metadata": {"managedFields": [], "name": "p"}}, 3]},  # an item that is not an object
        {"items": None},
        [1, 2],
    ],
)
def test_an_object_list_of_another_shape_falls_back_to_the_whole_decoding(body: object) -> None:
    data = json.dumps(body).encode()
    expected = json.loads(data)
    if isinstance(expected, dict) and expected.get("items"):
        for item in expected["items"]:
            if isinstance(item, dict) and isinstance(item.get("metadata"), dict):
                item["metadata"].pop("managedFields", None)
    assert json_codec.loads_object_list(data) == expected


def test_an_object_list_that_is_not_json_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="Expecting property name"):
        json_codec.loads_object_list(b"{not json")
