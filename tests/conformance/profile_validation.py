"""Profile validation compared with upstream kube-scheduler: does each spec get accepted or refused by both?

Upstream's side. kube-scheduler validates its configuration at start-up in three steps: strict decoding of
the file (``LoadConfigFromFile``), ``ValidateKubeSchedulerConfiguration`` (percentageOfNodesToScore, removed
plugins, duplicate and invalid plugin args), and ``scheduler.New``, which builds every profile's framework
(unknown plugins, wrong extension points, duplicates, one queue sort, a bind plugin, score weights, the
plugins' own constructors). None of that needs the API server, and ``--write-config-to`` makes it exit 0
right after ``scheduler.New``, before it would connect. So each spec runs as
``kube-scheduler --config=... --secure-port=0 --write-config-to=...`` with a kubeconfig naming a closed port
on 127.0.0.1: exit 0 is *accepted*; otherwise the process logged ``"command failed" err="..."`` with the error
(about 0.3 s a spec; several run in parallel).

Our side is the path that decides a SchedulerProfile's Ready condition: the CRD's OpenAPI schema (what
``kubectl apply`` refuses before the operator sees the object), then ``SchedulerApp.apply_profile``
(``SchedulerProfileSpec.model_validate`` → ``resolve_profile`` → ``Framework``). The verdict says which of
those layers refused the spec.

Messages. Where our text is meant to be upstream's (builder and framework errors), every one of our errors
must appear in upstream's (ours put the field first: ``plugins.filter.enabled[0]: plugin "X" does not extend
FilterPlugin plugin``; upstream prints that field only for config-validation errors, under ``profiles[0].``).
Schema and pydantic rejections are the API server's and pydantic's texts, deliberately (they come earlier,
and say what kubectl users expect); they are compared for accept/reject only.

The equivalent upstream profile would disable upstream's defaults we do not implement (``OMITTED_DEFAULTS``,
empty since issue 12), as the scheduling comparison does (:func:`tests.conformance.oracle.upstream_profile`).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import random
import re
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.framework.builder import ProfileError, resolve_profile
from kopf_scheduler.plugins.registry import default_registry
from kopf_scheduler.settings import RunSettings
from tests.conformance.oracle import parse_line, upstream_profile
from tests.conformance.profile_specs import OMITTED_DEFAULTS, SpecCase, generate_spec
from tools.localcluster import default_bin_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = REPO_ROOT / "crds" / "schedulerprofile.yaml"
UPSTREAM_TIMEOUT = 60.0

#: Our texts that are deliberately not upstream's, though the verdict is the same: key → why.
DELIBERATE_MESSAGES: dict[str, str] = {
    "args-decoding": (
        "args that do not decode (wrong type, unknown field, wrong apiVersion or kind): upstream prints Go's "
        "decoder errors (`json: cannot unmarshal string into Go struct field NodeResourcesFitArgs.ignoredResources "
        'of type []string`, `no kind "XArgs" is registered for version ...`); ours name the field in the same '
        "path syntax as every other error (`pluginConfig[0].args.ignoredResources: Invalid value: ...`)."
    ),
    "removed-in-multipoint": (
        "a removed plugin (EBSLimits, ...) in multiPoint: upstream only checks the single extension points and "
        'then fails building the framework with `PreFilterPlugin "EBSLimits" does not exist`; we say that it '
        "was removed, as upstream does for the other lists (builder.py, 'Where we deliberately differ')."
    ),
}

_PROFILE_PREFIX = "profiles[0]."
_STRIP = (re.compile(r"^initializing profiles: creating profile for scheduler name [^:]+: "),)


@dataclass(frozen=True)
class Verdict:
    """Accepted, or refused by ``layer`` with ``message``."""

    accepted: bool
    layer: str = ""
    message: str = ""
    errors: tuple[str, ...] = ()


@dataclass
class Comparison:
    """One spec's verdicts on both sides and how they compare."""

    case: SpecCase
    upstream: Verdict
    ours: Verdict
    #: "match", "deliberate" (a documented text difference), "differs" (ours meant to be upstream's text, but
    #: is not), "n/a" (accepted, or a layer whose text is deliberately not upstream's).
    message: str = "n/a"
    problems: list[str] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        """Both accepted or both refused. No verdict difference is excused in advance (issue 37)."""
        return self.upstream.accepted == self.ours.accepted


# -- upstream ------------------------------------------------------------------------------------------------------


def upstream_config(case: SpecCase, kubeconfig: Path) -> dict[str, Any]:
    """The KubeSchedulerConfiguration that holds the case's spec as its one profile."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [upstream_profile(case.name, case.spec, OMITTED_DEFAULTS)],
    }


def _closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound and released): a connection would be refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_kubeconfig(path: Path) -> Path:
    server = f"https://127.0.0.1:{_closed_port()}"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "none", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "none", "user": {"token": "none"}}],
                "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
                "current-context": "none",
            }
        )
    )
    return path


def upstream_error(stderr: str) -> str:
    """The error kube-scheduler exited with: the ``"command failed" err=...`` line, else ``Error: ...``."""
    for line in stderr.splitlines():
        parsed = parse_line(line)
        if parsed is not None and parsed[1] == "command failed":
            return parsed[2].get("err", "")
        if line.startswith("Error: "):
            return line.removeprefix("Error: ")
    return stderr.strip().splitlines()[-1] if stderr.strip() else ""


def core_message(message: str) -> str:
    for pattern in _STRIP:
        message = pattern.sub("", message)
    return message


def run_upstream_one(case: SpecCase, binary: Path, work_dir: Path, kubeconfig: Path) -> Verdict:
    config = work_dir / f"{case.name}.yaml"
    # JSON, which kube-scheduler reads as YAML: PyYAML leaves `n`/`y` unquoted, and Go's YAML 1.1 reads them as bools.
    config.write_text(json.dumps(upstream_config(case, kubeconfig)))
    out = work_dir / f"{case.name}.out.yaml"
    args = [str(binary), f"--config={config}", "--secure-port=0", f"--write-config-to={out}", "-v=0"]
    env = {**os.environ, "GOMAXPROCS": "1"}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=UPSTREAM_TIMEOUT, env=env, check=False)
    if proc.returncode == 0:
        return Verdict(True)
    message = core_message(upstream_error(proc.stderr))
    if not message:
        raise RuntimeError(
            f"kube-scheduler exited {proc.returncode} without an error for seed {case.seed}:\n{proc.stderr}"
        )
    return Verdict(False, "upstream", message)


def upstream_binary() -> Path:
    """kube-scheduler of the pinned release; a missing one is an error (``make test`` builds it first)."""
    binary = default_bin_dir() / "kube-scheduler"
    if not os.access(binary, os.X_OK):
        raise FileNotFoundError(
            f"upstream kube-scheduler not found at {binary}: run `make binaries` (tools/build-upstream.sh) "
            "or set KOPF_SCHEDULER_BIN_DIR"
        )
    return binary


def run_upstream(cases: Sequence[SpecCase], work_dir: Path, *, parallel: int = 2) -> dict[int, Verdict]:
    binary = upstream_binary()
    work_dir.mkdir(parents=True, exist_ok=True)
    kubeconfig = write_kubeconfig(work_dir / "kubeconfig.yaml")
    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = {c.seed: pool.submit(run_upstream_one, c, binary, work_dir, kubeconfig) for c in cases}
        return {seed: future.result() for seed, future in futures.items()}


# -- ours ------------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_PATH.read_text())
    (version,) = (v for v in crd["spec"]["versions"] if v.get("storage"))
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def crd_schema_errors(spec: Mapping[str, Any]) -> list[str]:
    """What the API server's OpenAPI validation of the CRD would refuse (types, ranges, minLength)."""
    validator = jsonschema.Draft4Validator(_crd_spec_schema())
    return sorted(f"spec.{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(spec))


def run_ours(case: SpecCase) -> Verdict:
    """The CRD schema, then the operator's own path (``apply_profile``), naming the layer that refused."""
    schema = crd_schema_errors(case.spec)
    if schema:
        return Verdict(False, "crd-schema", "; ".join(schema), tuple(schema))
    app = SchedulerApp(settings=RunSettings(), rng=random.Random(0), hostname="validate")
    outcome = app.apply_profile(name=case.name, spec=case.spec, generation=1)
    if outcome.ready:
        return Verdict(True)
    # Which layer: re-run the first two steps of apply_profile on their own.
    try:
        model = SchedulerProfileSpec.model_validate(case.spec)
    except ValueError:
        return Verdict(False, "pydantic", outcome.message)
    try:
        resolve_profile(case.name, model, default_registry())
    except ProfileError as exc:
        return Verdict(False, "builder", outcome.message, tuple(str(e) for e in exc.errors))
    return Verdict(False, "framework", outcome.message, (outcome.message,))


# -- comparison ------------------------------------------------------------------------------------------------


def deliberate_message(upstream: Verdict, error: str) -> str | None:
    """The :data:`DELIBERATE_MESSAGES` key that explains why our ``error`` is not in upstream's text, if any."""
    if upstream.message.startswith(("decoding .profiles", "strict decoding error")):
        return "args-decoding"
    if error.startswith("plugins.multiPoint") and "was invalid in version" in error:
        return "removed-in-multipoint"
    return None


def compare_messages(upstream: Verdict, ours: Verdict) -> tuple[str, list[str]]:
    """Our upstream-style errors must each be in upstream's message (with upstream's ``profiles[0].`` path).

    "match", "deliberate" (every mismatch is a documented one), "differs", or "n/a" (nothing to compare).
    """
    if upstream.accepted or ours.accepted or ours.layer not in ("builder", "framework"):
        return "n/a", []
    missing = []
    for error in ours.errors:
        body = error.split(": ", 1)[1] if ": " in error else error
        if _PROFILE_PREFIX + error not in upstream.message and body not in upstream.message:
            missing.append(error)
    expected = upstream.message.count(_PROFILE_PREFIX)
    found = sum(1 for e in ours.errors if _PROFILE_PREFIX + e in upstream.message)
    if missing and all(deliberate_message(upstream, m) for m in missing):
        return "deliberate", []
    problems = [f"ours not in upstream's message: {m}" for m in missing]
    if expected > found and not missing:
        problems.append(f"upstream reports {expected} field errors, ours {len(ours.errors)}")
    return ("differs" if problems else "match"), problems


def compare(case: SpecCase, upstream: Verdict, ours: Verdict) -> Comparison:
    result = Comparison(case, upstream, ours)
    if not result.agree:
        side = "accepted" if ours.accepted else f"refused ({ours.layer}: {ours.message})"
        theirs = "accepted" if upstream.accepted else f"refused: {upstream.message}"
        result.problems.append(f"ours {side}; upstream {theirs}")
    else:
        result.message, result.problems = compare_messages(upstream, ours)
    return result


def run(seeds: Iterable[int], work_dir: Path | None = None, *, parallel: int = 2) -> list[Comparison]:
    """Generate the specs of ``seeds``, ask both sides, compare."""
    cases = [generate_spec(seed) for seed in seeds]
    with tempfile.TemporaryDirectory(prefix="validate-") as tmp:
        upstream = run_upstream(cases, work_dir or Path(tmp), parallel=parallel)
    return [compare(case, upstream[case.seed], run_ours(case)) for case in cases]


def summary(results: Sequence[Comparison], seconds: float) -> dict[str, Any]:
    """The JSON summary: counts per category and verdict, and every disagreement or message difference."""
    by_category: dict[str, dict[str, int]] = {}
    for r in results:
        row = by_category.setdefault(r.case.category, {"specs": 0, "upstream_rejects": 0, "agree": 0})
        row["specs"] += 1
        row["upstream_rejects"] += not r.upstream.accepted
        row["agree"] += r.agree
    layers: dict[str, int] = {}
    for r in results:
        if not r.ours.accepted:
            layers[r.ours.layer] = layers.get(r.ours.layer, 0) + 1
    return {
        "specs": len(results),
        "accepted_upstream": sum(r.upstream.accepted for r in results),
        "agree": sum(r.agree for r in results),
        "disagree": sum(not r.agree for r in results),
        "messages": {k: sum(r.message == k for r in results) for k in ("match", "deliberate", "differs", "n/a")},
        "our_rejecting_layer": dict(sorted(layers.items())),
        "by_category": dict(sorted(by_category.items())),
        "seconds": round(seconds, 1),
        "findings": [
            {
                "seed": r.case.seed,
                "category": r.case.category,
                "spec": r.case.spec,
                "agree": r.agree,
                "upstream": r.upstream.message if not r.upstream.accepted else "accepted",
                "ours": f"{r.ours.layer}: {r.ours.message}" if not r.ours.accepted else "accepted",
                "problems": r.problems,
            }
            for r in results
            if r.problems
        ],
    }


def timed_run(
    seeds: Iterable[int], work_dir: Path | None = None, *, parallel: int = 2
) -> tuple[list[Comparison], float]:
    started = time.monotonic()
    results = run(seeds, work_dir, parallel=parallel)
    return results, time.monotonic() - started
