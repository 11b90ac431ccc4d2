"""The committed CRD is exactly what the models generate (regenerate with `make crds`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kopf_scheduler.api.crd import render, scheduler_profile_crd

ROOT = Path(__file__).resolve().parents[2]


def test_committed_crd_matches_the_models() -> None:
    committed = (ROOT / "crds" / "schedulerprofile.yaml").read_text()
    assert committed == render(), "crds/schedulerprofile.yaml drifted from the models: run `make crds`"


def _walk(node: object, path: str = "") -> list[str]:
    """Paths of schema nodes that are not structural (no type and not preserve-unknown-fields)."""
    problems: list[str] = []
    if isinstance(node, dict):
        if ("properties" in node or "items" in node or "additionalProperties" in node) and "type" not in node:
            problems.append(path)
        for key in ("anyOf", "oneOf", "allOf", "$ref", "title", "default"):
            if key in node:
                problems.append(f"{path}.{key}")
        for key, value in node.get("properties", {}).items():
            problems += _walk(value, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            problems += _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            problems += _walk(node["additionalProperties"], f"{path}{{}}")
    return problems


def test_schema_is_structural() -> None:
    schema = scheduler_profile_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _walk(schema) == []


def test_plugin_args_are_opaque_and_described() -> None:
    spec = scheduler_profile_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    args = spec["properties"]["pluginConfig"]["items"]["properties"]["args"]
    assert args.get("x-kubernetes-preserve-unknown-fields") is True
    assert spec["properties"]["plugins"]["description"]
    assert yaml.safe_load(render())["spec"]["names"]["shortNames"] == ["sp"]


def test_extenders_have_upstreams_field_names() -> None:
    spec = scheduler_profile_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    extender = spec["properties"]["extenders"]["items"]
    assert extender["required"] == ["urlPrefix"]
    assert set(extender["properties"]) == {
        *("urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS"),
        *("tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"),
    }
    assert extender["properties"]["weight"]["format"] == "int64"
    tls = extender["properties"]["tlsConfig"]["properties"]
    assert set(tls) == {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}
    assert tls["caData"]["format"] == "byte"
    managed = extender["properties"]["managedResources"]["items"]
    assert set(managed["properties"]) == {"name", "ignoredByScheduler"}
