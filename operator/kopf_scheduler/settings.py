"""Run settings of ``kopf-scheduler run``: defaults, a versioned config file, and flags on top.

As with kube-scheduler, ``--config FILE`` loads every run setting from a versioned YAML document
(``apiVersion: kopf-scheduler.io/v1alpha1``, ``kind: KopfSchedulerConfiguration``), explicit flags override
it, and ``--write-config-to FILE`` writes the effective result. Bad values fail fast with a message that
names the setting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

CONFIG_API_VERSION = "kopf-scheduler.io/v1alpha1"
CONFIG_KIND = "KopfSchedulerConfiguration"
#: client-go's leaderelection JitterFactor: the renew deadline must exceed the retry period times it.
RETRY_JITTER_FACTOR = 1.2
#: client-go's defaults (kube-scheduler's --leader-elect-renew-deadline, --leader-elect-retry-period).
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0


class SettingsError(ValueError):
    """A bad flag or config file; the message names the setting."""


class RunSettings(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", validate_assignment=True)

    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces whose pods are scheduled; empty means cluster-wide."
    )
    peering_name: str = Field(default="kopf-scheduler", min_length=1, description="ClusterKopfPeering name.")
    peering_priority: int = Field(default=0, description="This replica's peering priority; unique per replica.")
    peering_lifetime: int = Field(default=15, ge=2, le=3600, description="Seconds a silent peer stays alive.")
    peering_renew_deadline: float | None = Field(
        default=None,
        gt=0,
        description=(
            "The active replica binds only while its peering record was written and read back this recently "
            "(kube-scheduler's leaderElection.renewDeadline); shorter than peeringLifetime. Unset: 10, or two "
            "thirds of peeringLifetime when that is shorter than 15."
        ),
    )
    peering_retry_period: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Seconds between the renewals of this replica's peering record (retryPeriod). Unset: 2, or half the "
            "renew deadline when that is shorter than 4."
        ),
    )
    metrics_port: int = Field(default=10259, ge=0, le=65535, description="Port of /metrics; 0 disables it.")
    health_port: int = Field(default=10260, ge=0, le=65535, description="Port of /healthz; 0 disables it.")
    bind_address: str = Field(default="0.0.0.0", description="Address the metrics and health servers bind to.")
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    pod_initial_backoff_seconds: float = Field(default=1.0, gt=0)
    pod_max_backoff_seconds: float = Field(default=10.0, gt=0)
    pod_max_in_unschedulable_pods_duration: float = Field(default=300.0, gt=0)
    delay_cache_until_active: bool = Field(
        default=False,
        description=(
            "A standby replica keeps no cache current and lists everything when it becomes active: less work and "
            "memory while standing by, a slower takeover (kube-scheduler's delayCacheUntilActive)."
        ),
    )
    explain_bound_pods: int = Field(
        default=256,
        ge=0,
        description="Bound pods whose success account /explain keeps (profiles with spec.explain.successes).",
    )
    explain_history: int = Field(default=5, ge=1, le=100, description="Failed attempts /explain keeps per pod.")
    # Secure serving of the metrics port, under kube-scheduler's flag names (web/).
    tls_cert_file: str = Field(default="", description="PEM certificate of the metrics port; empty: self-signed.")
    tls_private_key_file: str = Field(default="", description="PEM private key matching tlsCertFile.")
    authorization_always_allow_paths: list[str] = Field(
        default_factory=lambda: ["/healthz", "/readyz", "/livez"],
        description="Paths served without authorization (a trailing * matches a prefix).",
    )
    authentication_kubeconfig: str = Field(
        default="", description="kubeconfig of the API server that reviews tokens; empty: the operator's own."
    )
    authorization_kubeconfig: str = Field(
        default="", description="kubeconfig of the API server that reviews access; empty: the operator's own."
    )
    leader_elect: bool = Field(
        default=True,
        description="Replicas meet in the peering and one schedules; false: this replica schedules alone, unpaused.",
    )

    @model_validator(mode="after")
    def _backoffs_ordered(self) -> RunSettings:
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds:
            raise ValueError(
                "podMaxBackoffSeconds: Invalid value: must be greater than or equal to podInitialBackoffSeconds"
            )
        return self

    def leader_election(self) -> tuple[float, float, float]:
        """(lease duration, renew deadline, retry period) in seconds: client-go's 15/10/2 by default, the renew
        deadline and retry period scaled down with a shorter lifetime unless set."""
        renew = self.peering_renew_deadline
        if renew is None:
            renew = min(DEFAULT_RENEW_DEADLINE, round(self.peering_lifetime * 2 / 3, 3))
        retry = self.peering_retry_period
        if retry is None:
            retry = min(DEFAULT_RETRY_PERIOD, round(renew / 2, 3))
        return float(self.peering_lifetime), renew, retry

    @model_validator(mode="after")
    def _leader_election_timings(self) -> RunSettings:
        """client-go's checks of a LeaderElectionConfig (``NewLeaderElector``), the lease being the lifetime."""
        lifetime, renew, retry = self.leader_election()
        if lifetime <= renew:
            raise ValueError(
                "peeringLifetime (leaseDuration) must be greater than peeringRenewDeadline (renewDeadline)"
            )
        if renew <= RETRY_JITTER_FACTOR * retry:
            raise ValueError("peeringRenewDeadline (renewDeadline) must be greater than peeringRetryPeriod*1.2")
        return self

    @model_validator(mode="after")
    def _tls_pair(self) -> RunSettings:
        if bool(self.tls_cert_file) != bool(self.tls_private_key_file):
            raise ValueError("tlsCertFile and tlsPrivateKeyFile must be given together")
        return self


def _format_error(error: ValidationError, source: str) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(root)"
        parts.append(f"{where}: {item['msg']}")
    return f"invalid {source}: " + "; ".join(parts)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """The settings a config file sets (camelCase keys), after checking apiVersion and kind."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SettingsError(f"cannot read config file {path}: {e}") from e
    if not isinstance(document, dict):
        raise SettingsError(f"config file {path}: expected a mapping at the top level")
    api_version, kind = document.pop("apiVersion", None), document.pop("kind", None)
    if kind == "KubeSchedulerConfiguration":
        raise SettingsError(
            f"config file {path} is a KubeSchedulerConfiguration: its profiles become SchedulerProfiles with "
            f"`kopf-scheduler convert {path}` (kubectl apply them); the rest maps onto {CONFIG_KIND} or flags"
        )
    if api_version != CONFIG_API_VERSION or kind != CONFIG_KIND:
        raise SettingsError(
            f"config file {path}: apiVersion/kind must be {CONFIG_API_VERSION}/{CONFIG_KIND}, got {api_version}/{kind}"
        )
    return document


def resolve_settings(*, config_file: str | Path | None, overrides: dict[str, Any]) -> RunSettings:
    """Defaults ← config file ← explicit flags (``overrides`` uses the Python field names)."""
    values: dict[str, Any] = {}
    if config_file is not None:
        try:
            values = RunSettings.model_validate(load_config_file(config_file)).model_dump()
        except ValidationError as e:
            raise SettingsError(_format_error(e, f"config file {config_file}")) from e
    values.update(overrides)
    try:
        return RunSettings.model_validate(values)
    except ValidationError as e:
        raise SettingsError(_format_error(e, "settings")) from e


def dump_settings(settings: RunSettings) -> str:
    document = {"apiVersion": CONFIG_API_VERSION, "kind": CONFIG_KIND, **settings.model_dump(by_alias=True)}
    return yaml.safe_dump(document, sort_keys=False)


# -- kube-scheduler's command line ------------------------------------------------------------------------------
#: kube-scheduler's flag (argparse dest) → the RunSettings field it sets, where the meaning is the same.
KUBE_SCHEDULER_FLAGS = {
    "secure_port": "metrics_port",
    "logging_format": "log_format",
    "authentication_kubeconfig": "authentication_kubeconfig",
    "authorization_kubeconfig": "authorization_kubeconfig",
    "leader_elect": "leader_elect",
    "leader_elect_resource_name": "peering_name",
}
#: kube-scheduler's leader-election durations (Go durations) → the RunSettings field (seconds) each sets.
DURATION_FLAGS = {
    "leader_elect_renew_deadline": "peering_renew_deadline",
    "leader_elect_retry_period": "peering_retry_period",
}
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration_seconds(text: str) -> float:
    """A Go ``time.Duration`` string (``15s``, ``1m30s``, ``1.5h``) in seconds."""
    parts = _GO_DURATION.findall(text)
    if not text or "".join(number + unit for number, unit in parts) != text:
        raise SettingsError(f"invalid duration {text!r}: expected e.g. 15s, 1m30s")
    return sum(float(number) * _GO_UNITS[unit] for number, unit in parts)


def kube_scheduler_overrides(flags: Mapping[str, Any], given: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The settings kube-scheduler's flags set (``flags``: argparse dests given), checked against the overrides of
    our own flags (``given``: field → value) for contradictions; and notices to log for flags that change nothing.

    Same meaning: ``--secure-port``, ``--logging-format``, ``--authentication-kubeconfig``,
    ``--authorization-kubeconfig``, ``--leader-elect``, ``--leader-elect-resource-name`` (the peering's name),
    ``--leader-elect-lease-duration`` (the peering lifetime, whole seconds), ``--leader-elect-renew-deadline`` and
    ``--leader-elect-retry-period`` (the renew-deadline gate, ``standing.py``), ``-v`` (4 or more: debug, else info).
    ``--leader-elect-resource-lock`` accepts ``leases``, ``--leader-elect-resource-namespace`` changes nothing (the
    peering is cluster-scoped).
    """
    overrides = {KUBE_SCHEDULER_FLAGS[dest]: value for dest, value in flags.items() if dest in KUBE_SCHEDULER_FLAGS}
    notices: list[str] = []
    for dest, field in DURATION_FLAGS.items():
        if dest in flags:
            overrides[field] = go_duration_seconds(flags[dest])
    if "verbosity" in flags:
        overrides["log_level"] = "debug" if int(flags["verbosity"]) >= 4 else "info"
    if "leader_elect_lease_duration" in flags:
        seconds = go_duration_seconds(flags["leader_elect_lease_duration"])
        if seconds != int(seconds):
            raise SettingsError(
                f"--leader-elect-lease-duration={flags['leader_elect_lease_duration']}: whole seconds only"
            )
        overrides["peering_lifetime"] = int(seconds)
    lock = flags.get("leader_elect_resource_lock", "leases")
    if lock != "leases":
        raise SettingsError(
            f"--leader-elect-resource-lock={lock}: only leases is accepted (the replicas meet in a ClusterKopfPeering)"
        )
    if "leader_elect_resource_namespace" in flags:
        notices.append("--leader-elect-resource-namespace changes nothing: the peering is cluster-scoped")
    for field, value in overrides.items():
        if field in given and given[field] != value:
            raise SettingsError(f"{field}: set twice, to {given[field]!r} and {value!r} (kube-scheduler's flag name)")
    return overrides, notices
