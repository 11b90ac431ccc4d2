"""Generate the SchedulerProfile CustomResourceDefinition from the pydantic models.

The CRD in ``crds/`` (and the Helm chart's copy) is an output of this module, never edited by hand, and a
unit test fails when it drifts from the models. Pydantic's JSON Schema is turned into a Kubernetes
*structural* schema: ``$ref``s inlined, ``Optional[X]`` as ``nullable``, free-form objects (plugin args,
pod-API-shaped fields) marked ``x-kubernetes-preserve-unknown-fields``, titles and defaults dropped (the
operator applies upstream's defaults itself, so the stored object stays what the user wrote).

Run ``python -m kopf_scheduler.api.crd`` to print it.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import yaml

GROUP = "kopf-scheduler.io"
VERSION = "v1alpha1"
KIND = "SchedulerProfile"
PLURAL = "schedulerprofiles"
SINGULAR = "schedulerprofile"
SHORT_NAMES = ["sp"]

Schema = dict[str, Any]


def _resolve(schema: Schema, defs: dict[str, Schema]) -> Schema:
    if "$ref" in schema:
        target = copy.deepcopy(defs[schema["$ref"].rsplit("/", 1)[-1]])
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _resolve(merged, defs)
    return schema


def structural(schema: Schema, defs: dict[str, Schema]) -> Schema:
    """One pydantic JSON-Schema node → a structural OpenAPI v3 node."""
    schema = _resolve(schema, defs)
    description = schema.get("description")
    for union in ("anyOf", "oneOf"):
        if union in schema:
            options = [o for o in schema[union] if o.get("type") != "null"]
            nullable = len(options) != len(schema[union])
            if len(options) == 1:
                inner = structural(options[0], defs)
            else:
                # Mixed unions are not structural; keep the value opaque and let the operator validate it.
                inner = {"x-kubernetes-preserve-unknown-fields": True}
            if nullable:
                inner["nullable"] = True
            if description and "description" not in inner:
                inner["description"] = description
            return inner
    out: Schema = {}
    if description:
        out["description"] = description
    kind = schema.get("type")
    if "const" in schema:
        out["type"] = kind or "string"
        out["enum"] = [schema["const"]]
        return out
    if "enum" in schema:
        out["type"] = kind or "string"
        out["enum"] = list(schema["enum"])
        return out
    if kind == "object" or "properties" in schema:
        out["type"] = "object"
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if properties:
            out["properties"] = {name: structural(prop, defs) for name, prop in properties.items()}
            if schema.get("required"):
                out["required"] = list(schema["required"])
        elif isinstance(additional, dict) and additional:
            out["additionalProperties"] = structural(additional, defs)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out
    if kind == "array":
        out["type"] = "array"
        out["items"] = structural(schema.get("items") or {}, defs)
        return out
    if kind in ("string", "integer", "number", "boolean"):
        out["type"] = kind
        for key in (
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "minLength",
            "maxLength",
            "pattern",
            "minItems",
            "maxItems",
            "format",
        ):
            if key in schema:
                out[key] = schema[key]
        return out
    out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def model_schema(model: type[Any]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return structural(raw, defs)


def scheduler_profile_crd() -> dict[str, Any]:
    from kopf_scheduler.api.profile import SchedulerProfileSpec, SchedulerProfileStatus

    spec = model_schema(SchedulerProfileSpec)
    status = model_schema(SchedulerProfileStatus)
    score_column = ".status.scorePlugins"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": ["scheduling"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {
                            "name": "Ready",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                        },
                        {"name": "Score-Plugins", "type": "string", "jsonPath": score_column, "priority": 0},
                        {
                            "name": "Reason",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
                            "priority": 1,
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "description": (
                                "SchedulerProfile hosts one kube-scheduler profile. Its metadata.name is the "
                                "scheduler name that pods select with spec.schedulerName."
                            ),
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def render() -> str:
    header = "# Generated by `python -m kopf_scheduler.api.crd` from the pydantic models; do not edit.\n"
    return header + yaml.safe_dump(scheduler_profile_crd(), sort_keys=False, width=120)


if __name__ == "__main__":
    sys.stdout.write(render())
