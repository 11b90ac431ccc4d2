"""Success accounts against upstream: a bound pod's /explain scores are the ones kube-scheduler computed.

The differential harness (runner.py) lets upstream kube-scheduler v1.36.3 and ``kopf-scheduler run`` decide
each pod of a seeded scenario on the same cluster state, and reads from upstream's log (verbosity 10 in
``schedule_one.go``) every Score plugin's weighted score per node and every node's total. Here our profile
(``conformance-args-a``: non-default weights and args) keeps success accounts (``spec.explain.successes``;
upstream gets the same spec without that field, which is ours). For every pod both bound after scoring, the
account our operator serves at ``/explain`` must list, for the winner and each runner-up, exactly upstream's
weighted score per plugin and upstream's total.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.generator import generate
from tests.conformance.runner import ARGS_PROFILES, Harness, PodResult, ProfileDef
from tests.e2e.operator_process import operator_command

pytestmark = pytest.mark.e2e

EXPLAINED = {"explain": {"successes": True}}
#: Non-default weights (NodeAffinity 5, ImageLocality 3) and args (RequestedToCapacityRatio, an added affinity).
ARGS_A = next(p for p in ARGS_PROFILES if p.name == "conformance-args-a")
PROFILE = ProfileDef(
    "conformance-explain-args",
    {**ARGS_A.spec, **EXPLAINED},
    "conformance-args-a with success accounts",
    upstream_spec=ARGS_A.spec,
)
#: A small scenario whose pods give at least 3 bound by both after scoring (many small scenarios leave a single
#: feasible node per pod, where upstream does not score).
SEED = 1


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    work_dir: Path = tmp_path_factory.mktemp("conformance-explain")
    with Harness([PROFILE], work_dir=work_dir, log=lambda line: None) as running:
        yield running


def _account(harness: Harness, pod: PodResult) -> dict[str, Any]:
    operator = harness.operator
    assert operator is not None
    url = f"https://127.0.0.1:{operator.metrics_port}"
    command = [*operator_command(), "explain", f"{pod.namespace}/{pod.name}", "--url", url]
    command += ["--insecure-skip-tls-verify", "--kubeconfig", str(operator.kubeconfig), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_bound_pods_are_explained_with_upstreams_scores(harness: Harness) -> None:
    compared: list[str] = []
    result = harness.run_scenario(generate(SEED, "small"), PROFILE.name)
    for pod in result.pods:
        if pod.ours.kind != "bound" or pod.upstream.kind != "bound" or not pod.upstream_scores:
            continue  # not bound by both, or upstream did not score (one feasible node, a batching hint)
        _assert_upstreams_scores(_account(harness, pod), pod)
        compared.append(f"{pod.namespace}/{pod.name}")
    seen = [(p.name, p.upstream.kind, p.ours.kind, len(p.upstream_scores)) for p in result.pods]
    assert len(compared) >= 3, f"too few pods bound by both after scoring to compare: {seen}"


def _assert_upstreams_scores(account: dict[str, Any], pod: PodResult) -> None:
    """Winner first; every listed node's total and weighted score per plugin are upstream's."""
    assert account["node"] == pod.ours.node
    assert account["candidates"][0]["node"] == pod.ours.node
    for candidate in account["candidates"]:
        node = candidate["node"]
        assert candidate["total"] == pod.upstream_scores[node], (pod.name, node)
        theirs = {plugin: scores[node] for plugin, scores in pod.upstream_plugin_scores.items() if node in scores}
        ours = {plugin: score["weighted"] for plugin, score in candidate["plugins"].items()}
        assert ours == theirs, (pod.name, node)
