"""``kopf-scheduler validate``: what the operator would make of SchedulerProfile manifests, offline.

Each manifest goes through :meth:`kopf_scheduler.app.SchedulerApp.apply_profile`, the very call the operator's
create/update handler makes (spec model, :func:`~kopf_scheduler.framework.builder.resolve_profile`, the plugins'
construction with their args, the extenders), on an app with no API client. So the answer is what the
profile's status would say: either the effective pipeline (``status.effectivePlugins``, ``scorePlugins``,
``omittedDefaultPlugins``, the Ready=True message) or the ``Ready=False, InvalidProfile``
message, word for word. Upstream has no such command; the nearest is starting kube-scheduler with the config
and reading its log.

Before that, the checks the API server makes at ``kubectl apply``: apiVersion and kind, a ``metadata.name``
that is a DNS-1123 subdomain, and the spec's shape against the pydantic models the CRD's openAPIV3Schema is
generated from (unknown fields, types, ranges); jsonschema is not needed at run time for that.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from kopf_scheduler.api.args import explain_validation_error
from kopf_scheduler.api.crd import GROUP, KIND, VERSION, model_schema
from kopf_scheduler.api.profile import EffectivePlugins, SchedulerProfileSpec
from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.convert import SOURCE_KIND, dns_name
from kopf_scheduler.framework.extension_points import ExtensionPoint
from kopf_scheduler.kube import HTTPExtenderTransport
from kopf_scheduler.settings import RunSettings

API_VERSION = f"{GROUP}/{VERSION}"


@dataclass(frozen=True, slots=True)
class ProfileVerdict:
    """One manifest's result: ``ready`` with the Ready condition's reason and message, as the operator sets them."""

    name: str
    ready: bool
    reason: str
    message: str
    #: The status fields of the pipeline (empty when not ready), in the CRD's JSON shape.
    pipeline_status: dict[str, Any] = field(default_factory=dict)

    def to_api(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ready": self.ready,
            "reason": self.reason,
            "message": self.message,
            **self.pipeline_status,
        }


class ManifestError(ValueError):
    """The input is not SchedulerProfile manifests at all (not YAML, another kind)."""


def load_manifests(text: str, *, source: str = "input") -> list[dict[str, Any]]:
    """The documents of ``text``; a ``List`` (``kubectl get -o yaml``, ``convert -o json``) counts as its items."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise ManifestError(f"{source}: not YAML: {e}") from e
    manifests: list[dict[str, Any]] = []
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == "List":
            manifests += document.get("items") or []
        else:
            manifests.append(document)
    if not manifests:
        raise ManifestError(f"{source}: no SchedulerProfile found")
    return manifests


def validate_manifests(manifests: Sequence[Any]) -> list[ProfileVerdict]:
    """One verdict per manifest, in order."""
    with _quiet_operator_log():
        return [validate_manifest(manifest, index) for index, manifest in enumerate(manifests)]


def validate_manifest(manifest: Any, index: int = 0) -> ProfileVerdict:
    """The API server's checks, then the operator's build."""
    label = f"document {index}"
    if not isinstance(manifest, dict):
        return _refused(label, f"expected a mapping, got {type(manifest).__name__}")
    found_metadata = manifest.get("metadata")
    metadata: dict[str, Any] = found_metadata if isinstance(found_metadata, dict) else {}
    name = metadata.get("name")
    label = name if isinstance(name, str) and name else label
    if (manifest.get("apiVersion"), manifest.get("kind")) != (API_VERSION, KIND):
        found = f"apiVersion {manifest.get('apiVersion')!r}, kind {manifest.get('kind')!r}"
        hint = " (convert it first: kopf-scheduler convert FILE)" if manifest.get("kind") == SOURCE_KIND else ""
        return _refused(label, f"expected apiVersion {API_VERSION} and kind {KIND}, got {found}{hint}")
    if not isinstance(name, str) or not name:
        return _refused(label, "metadata.name: Required value")
    if dns_name(name) != name:
        return _refused(label, f'metadata.name: Invalid value: "{name}": must be a lowercase RFC 1123 subdomain')
    spec = manifest.get("spec") or {}
    schema_problem = _schema_problem(spec)
    if schema_problem:
        return _refused(name, schema_problem)
    generation = metadata.get("generation")
    app = SchedulerApp(settings=RunSettings(), extender_transport=HTTPExtenderTransport())
    outcome = app.apply_profile(name=name, spec=spec, generation=generation if isinstance(generation, int) else 0)
    return ProfileVerdict(name, outcome.ready, outcome.reason, outcome.message, outcome.pipeline_status)


def _refused(name: str, message: str) -> ProfileVerdict:
    """Refused before the operator would see it: ``kubectl apply`` fails (reason ``Invalid``)."""
    return ProfileVerdict(name, False, "Invalid", message)


def _schema_problem(spec: Any) -> str:
    """What the CRD's structural schema would refuse, as ``spec.<path>: <problem>``; empty if nothing."""
    try:
        SchedulerProfileSpec.model_validate(spec)
    except ValidationError as e:
        return explain_validation_error(e, "spec")
    return "; ".join(_bounds_problems(spec, model_schema(SchedulerProfileSpec), "spec"))


def _bounds_problems(value: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    """The schema's ``minimum``/``maximum`` that the models leave to the CRD (``json_schema_extra``), in the API
    server's words; the models have already checked types and unknown fields."""
    if isinstance(value, dict):
        for key, child in (schema.get("properties") or {}).items():
            if key in value:
                yield from _bounds_problems(value[key], child, f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            yield from _bounds_problems(item, schema["items"], f"{path}[{index}]")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        invalid = f"{path}: Invalid value: {value}: {path} in body should be"
        if "minimum" in schema and value < schema["minimum"]:
            yield f"{invalid} greater than or equal to {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            yield f"{invalid} less than or equal to {schema['maximum']}"


@contextlib.contextmanager
def _quiet_operator_log() -> Iterator[None]:
    """apply_profile logs invalid profiles as warnings; the verdict already says it, once."""
    logger = logging.getLogger("kopf_scheduler")
    null = logging.NullHandler()
    logger.addHandler(null)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield
    finally:
        logger.removeHandler(null)
        logger.propagate = propagate


def format_verdict(verdict: ProfileVerdict) -> str:
    """The verdict for a terminal: the Ready condition, then the plugins per extension point (weights at score and
    placementScore)."""
    status = "Ready" if verdict.ready else "not Ready"
    lines = [f"{verdict.name}: {status} ({verdict.reason}): {verdict.message}"]
    if not verdict.pipeline_status:
        return "\n".join(lines)
    plugins = EffectivePlugins.model_validate(verdict.pipeline_status.get("effectivePlugins") or {})
    width = max(len(point.value) for point in ExtensionPoint) + 1
    for point in ExtensionPoint:
        entries = plugins.at(point.value)
        shown = ", ".join(f"{p.name}:{p.weight}" if p.weight is not None else p.name for p in entries)
        lines.append(f"  {point.value + ':':<{width}} {shown or '-'}")
    if omitted := verdict.pipeline_status.get("omittedDefaultPlugins"):
        lines.append(f"  omitted defaults: {', '.join(omitted)}")
    return "\n".join(lines)
