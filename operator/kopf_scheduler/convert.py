"""``kopf-scheduler convert``: a KubeSchedulerConfiguration (v1) becomes SchedulerProfile manifests.

kube-scheduler reads one ``KubeSchedulerConfiguration`` (``kubescheduler.config.k8s.io/v1``,
``k8s.io/kube-scheduler/config/v1/types.go``) that holds every profile plus process-wide settings; here each
profile is a SchedulerProfile object whose ``metadata.name`` is the scheduler name, and the process settings
belong to the operator (``kopf-scheduler run`` flags, the Helm chart) or have no counterpart. This module does
the split and says, field by field, what became of everything it did not carry over:

- ``profiles[]``: one SchedulerProfile each. ``plugins``, ``pluginConfig`` and ``percentageOfNodesToScore``
  are copied as written (the spec mirrors ``KubeSchedulerProfile``); ``schedulerName`` becomes
  ``metadata.name``. Upstream's defaulting is applied where it decides names: no profiles means one default
  profile, and a single profile without a name is ``default-scheduler`` (``SetDefaults_KubeSchedulerConfiguration``).
  Several profiles need distinct, non-empty names, as upstream's validation says.
- ``percentageOfNodesToScore`` (top level): upstream uses it for every profile that sets none, so it is copied
  into those profiles' specs.
- ``extenders``: upstream consults them for every profile; ours are per profile, so each profile gets the list.
- ``podInitialBackoffSeconds``, ``podMaxBackoffSeconds``, ``delayCacheUntilActive``: operator-wide here too
  (``run`` flags, chart ``extraArgs``, or the KopfSchedulerConfiguration file); reported with the flag to set.
- ``parallelism``, ``leaderElection``, ``clientConnection``, ``enableProfiling``,
  ``enableContentionProfiling``: reported as not carried over, with the reason and the nearest counterpart.

Decoding is strict, as kube-scheduler's: another apiVersion or kind, or an unknown field, is an error (a file
kube-scheduler would refuse is not silently half-converted). The plugins themselves are not checked here; the
spec's *shape* is (the pydantic models the CRD is generated from), and ``kopf-scheduler validate`` runs the
operator's builder on the result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from kopf_scheduler.api.args import explain_validation_error
from kopf_scheduler.api.crd import GROUP, KIND, VERSION
from kopf_scheduler.api.profile import Extender, SchedulerProfileSpec

SOURCE_API_VERSION = "kubescheduler.config.k8s.io/v1"
SOURCE_KIND = "KubeSchedulerConfiguration"
#: Upstream ``v1.DefaultSchedulerName``: the name of the one profile when none is named.
DEFAULT_SCHEDULER_NAME = "default-scheduler"

_PROFILE_FIELDS = frozenset({"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"})

#: Top-level fields with no place in a SchedulerProfile: why, and what to use instead.
_NOT_CARRIED_OVER: dict[str, str] = {
    "parallelism": (
        "no counterpart: kopf-scheduler filters and scores nodes on one event loop, there are no worker goroutines; "
        "its sampled node search decides as kube-scheduler's does with parallelism: 1"
    ),
    "leaderElection": (
        "replicas choose the active one by kopf peering (a ClusterKopfPeering), not a Lease: set the chart's "
        "peering.name, peering.priorityBase, peering.lifetime (run flags --peering-name, --peering-priority, "
        "--peering-lifetime; lifetime plays the part of leaseDuration); for leaderElect: false run one replica"
    ),
    "clientConnection": (
        "the operator uses its ServiceAccount in the cluster, else --kubeconfig / $KUBECONFIG; qps, burst and "
        "the content types have no counterpart"
    ),
    "enableProfiling": "no counterpart: the operator serves no /debug/pprof",
    "enableContentionProfiling": "no counterpart: the operator serves no /debug/pprof",
}

#: Top-level fields that are operator settings here: the ``kopf-scheduler run`` flag that sets them.
_OPERATOR_SETTINGS: dict[str, str] = {
    "podInitialBackoffSeconds": "--pod-initial-backoff-seconds",
    "podMaxBackoffSeconds": "--pod-max-backoff-seconds",
    "delayCacheUntilActive": "--delay-cache-until-active",
}

_TOP_LEVEL_FIELDS = frozenset(
    {"apiVersion", "kind", "profiles", "extenders", "percentageOfNodesToScore"}
    | _NOT_CARRIED_OVER.keys()
    | _OPERATOR_SETTINGS.keys()
)

_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1123_MAX_LENGTH = 253


class ConvertError(ValueError):
    """Input that is not a v1 KubeSchedulerConfiguration kube-scheduler would accept, or cannot be converted."""


@dataclass(frozen=True, slots=True)
class Note:
    """What became of one input field: ``field`` is its path in the KubeSchedulerConfiguration."""

    field: str
    text: str


@dataclass(frozen=True, slots=True)
class Conversion:
    """The SchedulerProfile manifests, and the notes about fields, by what became of them."""

    manifests: tuple[dict[str, Any], ...]
    carried_over: tuple[Note, ...] = ()
    operator_settings: tuple[Note, ...] = ()
    dropped: tuple[Note, ...] = ()
    warnings: tuple[Note, ...] = ()


def load_config(text: str, *, source: str = "input") -> dict[str, Any]:
    """The one YAML (or JSON) document of ``text``, checked to be a v1 KubeSchedulerConfiguration."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise ConvertError(f"{source}: not YAML: {e}") from e
    if len(documents) != 1:
        raise ConvertError(f"{source}: expected one KubeSchedulerConfiguration document, found {len(documents)}")
    config = documents[0]
    if not isinstance(config, dict):
        raise ConvertError(f"{source}: expected a mapping at the top level, got {type(config).__name__}")
    api_version, kind = config.get("apiVersion"), config.get("kind")
    if (api_version, kind) != (SOURCE_API_VERSION, SOURCE_KIND):
        hint = ""
        if kind == SOURCE_KIND and isinstance(api_version, str) and api_version.startswith("kubescheduler."):
            hint = " (only v1 is read; kube-scheduler 1.36 reads only v1 too: move the file to v1 first)"
        raise ConvertError(
            f"{source}: expected apiVersion {SOURCE_API_VERSION} and kind {SOURCE_KIND}, "
            f"got apiVersion {api_version!r} and kind {kind!r}{hint}"
        )
    return config


def convert_config(config: Mapping[str, Any]) -> Conversion:
    """Split a v1 KubeSchedulerConfiguration (as loaded by :func:`load_config`) into SchedulerProfiles."""
    profiles = _list(config, "profiles", "profiles")
    extenders = _list(config, "extenders", "extenders")
    _refuse_unknown_fields(config, profiles, extenders)
    _check_extenders(extenders)
    if not profiles:
        profiles = [{}]
    names = _scheduler_names(profiles)
    carried: list[Note] = []
    warnings: list[Note] = []
    top_percentage = _top_percentage(config)
    _check_process_settings(config)
    manifests = []
    for index, (profile, name) in enumerate(zip(profiles, names, strict=True)):
        path = f"profiles[{index}]"
        spec = _profile_spec(profile)
        if top_percentage and spec.get("percentageOfNodesToScore") is None:
            rest = {key: value for key, value in spec.items() if key != "percentageOfNodesToScore"}
            spec = {"percentageOfNodesToScore": top_percentage, **rest}
        if extenders:
            spec["extenders"] = [dict(e) for e in extenders]
        _check_spec(spec, path)
        manifests.append(_manifest(name, spec))
        carried.append(_profile_note(profile, name, path))
        if name == DEFAULT_SCHEDULER_NAME:
            warnings.append(Note(f"{path}.schedulerName", _DEFAULT_SCHEDULER_WARNING))
    carried += _top_level_carried(profiles, top_percentage, extenders)
    dropped = [Note(key, why) for key, why in _NOT_CARRIED_OVER.items() if key in config]
    return Conversion(tuple(manifests), tuple(carried), _operator_notes(config), tuple(dropped), tuple(warnings))


def _operator_notes(config: Mapping[str, Any]) -> tuple[Note, ...]:
    """The operator-wide settings the config sets, with the flag (and settings-file key) that sets them here."""
    notes = []
    for key, flag in _OPERATOR_SETTINGS.items():
        if key in config:
            value = json.dumps(config[key])  # as YAML and the flag spell it: true, not True
            text = (
                f"{value}: operator-wide setting: `kopf-scheduler run {flag} {value}` (chart: extraArgs) "
                f"or {key}: {value} in a KopfSchedulerConfiguration (--config)"
            )
            notes.append(Note(key, text))
    return tuple(notes)


def _top_percentage(config: Mapping[str, Any]) -> int | None:
    """Upstream validates the top-level value even where every profile overrides it."""
    value = config.get("percentageOfNodesToScore")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConvertError(f"percentageOfNodesToScore: Invalid value: {value!r}: expected an integer")
    if not 0 <= value <= 100:
        raise ConvertError(f"percentageOfNodesToScore: Invalid value: {value}: not in valid range [0-100]")
    return value


def _check_process_settings(config: Mapping[str, Any]) -> None:
    """Upstream's checks of the settings that do not become profile fields (its texts), so that a file
    kube-scheduler refuses is refused here too: parallelism and the backoffs (defaults 16, 1 and 10)."""
    values = {key: config.get(key, default) for key, default in _PROCESS_DEFAULTS.items()}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConvertError(f"{key}: Invalid value: {value!r}: expected an integer")
    if values["parallelism"] <= 0:
        raise ConvertError(
            f"parallelism: Invalid value: {values['parallelism']}: should be an integer value greater than zero"
        )
    initial, maximum = values["podInitialBackoffSeconds"], values["podMaxBackoffSeconds"]
    if initial <= 0:
        raise ConvertError(f"podInitialBackoffSeconds: Invalid value: {initial}: must be greater than 0")
    if maximum < initial:
        raise ConvertError(
            f"podMaxBackoffSeconds: Invalid value: {maximum}: must be greater than or equal to PodInitialBackoffSeconds"
        )


_PROCESS_DEFAULTS = {"parallelism": 16, "podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 10}

_DEFAULT_SCHEDULER_WARNING = (
    "pods without spec.schedulerName get default-scheduler: while kube-scheduler runs with that profile too, both "
    "schedulers place those pods; stop kube-scheduler's default-scheduler profile or rename this one"
)


def _refuse_unknown_fields(
    config: Mapping[str, Any], profiles: Sequence[Mapping[str, Any]], extenders: Sequence[Any]
) -> None:
    """Upstream decodes strictly: every unknown field, at any depth, sorted, in one error."""
    unknown = [str(key) for key in config if key not in _TOP_LEVEL_FIELDS]
    for index, profile in enumerate(profiles):
        path = f"profiles[{index}]"
        unknown += [f"{path}.{key}" for key in profile if key not in _PROFILE_FIELDS]
        spec = {key: value for key, value in profile.items() if key in _PROFILE_FIELDS and key != "schedulerName"}
        unknown += _extra_fields(_SPEC, spec, path)
    unknown += _extra_fields(_EXTENDERS, extenders, "extenders")
    if unknown:
        message = ", ".join(f'unknown field "{field}"' for field in sorted(unknown))
        if "featureGates" in unknown:
            message += " (feature gates are kube-scheduler's --feature-gates flag, not a configuration field)"
        raise ConvertError(f"strict decoding error: {message}")


def _extra_fields(model: TypeAdapter[Any], value: Any, prefix: str) -> list[str]:
    """The paths of the fields pydantic's ``extra="forbid"`` refuses (the models mirror upstream's types)."""
    try:
        model.validate_python(value)
    except ValidationError as e:
        return [_json_path(prefix, error["loc"]) for error in e.errors() if error["type"] == "extra_forbidden"]
    return []


def _json_path(prefix: str, loc: Sequence[int | str]) -> str:
    """``profiles[0]`` + ``("plugins", "score", "enabled", 0)`` → ``profiles[0].plugins.score.enabled[0]``."""
    path = prefix
    for part in loc:
        path = f"{path}[{part}]" if isinstance(part, int) else f"{path}.{part}" if path else str(part)
    return path


def _list(mapping: Mapping[str, Any], key: str, path: str) -> list[Any]:
    value = mapping.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ConvertError(f"{path}: expected a list of objects")
    return value


def _scheduler_names(profiles: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each profile's SchedulerProfile name: its schedulerName (upstream's defaulting and uniqueness rules),
    lowered to a DNS-1123 subdomain if it is not one (metadata.name and a pod's spec.schedulerName must be)."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for index, profile in enumerate(profiles):
        raw = profile.get("schedulerName")
        if raw is None and len(profiles) == 1:
            raw = DEFAULT_SCHEDULER_NAME
        if raw is not None and not isinstance(raw, str):
            raise ConvertError(f"profiles[{index}].schedulerName: Invalid value: {raw!r}: expected a string")
        if not raw:
            raise ConvertError(f"profiles[{index}].schedulerName: Required value")
        name = dns_name(raw)
        if not name:
            raise ConvertError(f"profiles[{index}].schedulerName: {raw!r} has nothing to make a DNS name of")
        if name in seen:
            raise ConvertError(
                f"profiles[{index}].schedulerName: Duplicate value: "
                f'"profiles[{seen[name]}].schedulerName" (both become SchedulerProfile {name!r})'
            )
        seen[name] = index
        names.append(name)
    return names


def dns_name(name: str) -> str:
    """``name`` if it is a DNS-1123 subdomain, else the nearest one: lower case, other characters as ``-``."""
    if len(name) <= _DNS1123_MAX_LENGTH and _DNS1123_SUBDOMAIN.fullmatch(name):
        return name
    lowered = re.sub(r"[^a-z0-9.-]+", "-", name.lower())
    labels = [label.strip("-") for label in lowered.split(".")]
    return ".".join(label for label in labels if label)[:_DNS1123_MAX_LENGTH].rstrip("-.")


def _profile_spec(profile: Mapping[str, Any]) -> dict[str, Any]:
    return {key: profile[key] for key in ("percentageOfNodesToScore", "plugins", "pluginConfig") if key in profile}


def _check_spec(spec: dict[str, Any], path: str) -> None:
    """The spec's shape, with the models the CRD is generated from (what the API server's schema checks)."""
    try:
        SchedulerProfileSpec.model_validate(spec)
    except ValidationError as e:
        raise ConvertError(explain_validation_error(e, path)) from e


def _check_extenders(extenders: list[Any]) -> None:
    """Checked once, under their own path (every profile gets the same list)."""
    try:
        _EXTENDERS.validate_python(extenders)
    except ValidationError as e:
        raise ConvertError(explain_validation_error(e, "extenders")) from e


_EXTENDERS = TypeAdapter(list[Extender])
_SPEC = TypeAdapter(SchedulerProfileSpec)


def _manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name}, "spec": spec}


def _profile_note(profile: Mapping[str, Any], name: str, path: str) -> Note:
    raw = profile.get("schedulerName")
    if raw is None:
        origin = f"no schedulerName: upstream's default, {name}"
    elif raw != name:
        origin = f"schedulerName {raw!r} is not a DNS-1123 subdomain: named {name}; pods must select {name}"
    else:
        origin = f"schedulerName {name}"
    copied = [key for key in ("plugins", "pluginConfig", "percentageOfNodesToScore") if key in profile]
    what = f", {', '.join(copied)} copied" if copied else ", kube-scheduler's default plugins"
    return Note(path, f"SchedulerProfile {name} ({origin}{what})")


def _top_level_carried(
    profiles: Sequence[Mapping[str, Any]], top_percentage: int | None, extenders: list[Any]
) -> list[Note]:
    notes = []
    if top_percentage is not None:
        own = [i for i, p in enumerate(profiles) if p.get("percentageOfNodesToScore") is not None]
        if top_percentage == 0:
            text = "0 is the adaptive default, which is what a profile without percentageOfNodesToScore gets"
        else:
            text = f"{top_percentage}: copied into spec.percentageOfNodesToScore of every profile that sets none"
        if own:
            owners = ", ".join(f"profiles[{i}]" for i in own)
            text += f" ({owners} {'sets its' if len(own) == 1 else 'set their'} own, which wins, as upstream)"
        notes.append(Note("percentageOfNodesToScore", text))
    if extenders:
        notes.append(
            Note(
                "extenders",
                f"{len(extenders)} extender(s): copied into spec.extenders of every profile "
                "(kube-scheduler consults them for all profiles)",
            )
        )
    return notes


def render_manifests(manifests: Sequence[dict[str, Any]], output: str = "yaml") -> str:
    """YAML documents separated by ``---``, or a JSON ``List``: either way ``kubectl apply -f -`` takes it."""
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifests)}, indent=2) + "\n"
    return yaml.safe_dump_all(manifests, sort_keys=False, explicit_start=True, width=120)


def render_report(conversion: Conversion) -> str:
    """The notes as a readable list (for stderr)."""
    sections = [
        ("carried over", conversion.carried_over),
        ("set on the operator instead (not part of a SchedulerProfile)", conversion.operator_settings),
        ("not carried over", conversion.dropped),
        ("warnings", conversion.warnings),
    ]
    lines = [f"kopf-scheduler convert: {len(conversion.manifests)} SchedulerProfile(s)"]
    for title, notes in sections:
        if notes:
            lines.append(f"{title}:")
            lines += [f"  - {note.field}: {note.text}" for note in notes]
    return "\n".join(lines) + "\n"
