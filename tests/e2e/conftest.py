"""e2e tests run against a real control plane (see tests/conftest.py); every test here is marked ``e2e``.

Deselect them with ``pytest -m 'not e2e'``; point them at another cluster with ``KOPF_SCHEDULER_KUBECONFIG``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import Cluster, _dns_label
from tests.e2e.operator_process import OperatorProcess, apply_crds, create_profile, delete_peering, delete_profile

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)


# ---- the operator as a real process (tests/e2e/operator_process.py) ----------------------------------------
# Fixtures for tests that run `kopf-scheduler run` against the session's control plane. Every test gets its
# own peering name and its own profile names, so a replica or a profile left over from one test can never
# take part in another.

_OPERATORS_KEY = pytest.StashKey[list["OperatorProcess"]]()


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> list[str]:
    """The CRDs in crds/ (SchedulerProfile, kopf peering), applied once per session and Established."""
    return apply_crds(cluster.api)


@pytest.fixture
def peering_name(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[str]:
    """A ClusterKopfPeering name unique to this test (deleted afterwards)."""
    name = f"p-{_dns_label(request.node.name, 40)}-{secrets.token_hex(3)}"
    yield name
    delete_peering(cluster.api, name)


OperatorFactory = Callable[..., "OperatorProcess"]


@pytest.fixture
def operator_factory(
    cluster: Cluster, crds: list[str], peering_name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[OperatorFactory]:
    """``make(peering_priority=0, extra_args=(), start=True, **kwargs) -> OperatorProcess``.

    Replicas share the test's peering name unless told otherwise, log into the test's tmp_path, and are
    stopped (SIGTERM, then SIGKILL) after the test; a failing test's report shows their log tails.
    """
    started: list[OperatorProcess] = []
    request.node.stash[_OPERATORS_KEY] = started

    def make(
        peering_priority: int = 0,
        extra_args: Sequence[str] = (),
        *,
        start: bool = True,
        name: str | None = None,
        **kwargs: Any,
    ) -> OperatorProcess:
        kwargs.setdefault("peering_name", peering_name)
        process = OperatorProcess(
            cluster.kubeconfig,
            peering_priority=peering_priority,
            extra_args=extra_args,
            log_dir=tmp_path,
            name=name or f"operator-{len(started)}-prio{peering_priority}",
            **kwargs,
        )
        started.append(process)
        if start:
            process.start()
        return process

    yield make
    for process in started:
        process.stop()


@pytest.fixture
def operator(operator_factory: OperatorFactory) -> OperatorProcess:
    """One running replica with default settings and this test's peering name."""
    return operator_factory()


ProfileFactory = Callable[..., str]


@pytest.fixture
def profiles(cluster: Cluster, crds: list[str], request: pytest.FixtureRequest) -> Iterator[ProfileFactory]:
    """``make(spec=None, *, name=None, suffix=None) -> name``: SchedulerProfiles unique to this test.

    Removed afterwards even if no operator runs any more (the operator's finalizer is dropped first).
    """
    created: list[str] = []
    prefix = f"s-{_dns_label(request.node.name, 40)}-{secrets.token_hex(2)}"

    def make(spec: Mapping[str, Any] | None = None, *, name: str | None = None, suffix: str | None = None) -> str:
        profile = name or f"{prefix}-{suffix or len(created)}"
        create_profile(cluster.api, profile, spec)
        created.append(profile)
        return profile

    yield make
    for profile in created:
        delete_profile(cluster.api, profile, force=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the log tails of the test's operator processes to a failing test's report."""
    report = yield
    if report.failed:
        for process in item.stash.get(_OPERATORS_KEY, []):
            report.sections.append((f"operator log tail: {process.name}", process.log_tail(80)))
    return report


@pytest.fixture
def priority_classes(cluster: Cluster) -> Iterator[dict[str, str]]:
    """``{"low": name, "high": name}``: PriorityClasses of value 10 and 1000, deleted after the test (the
    Priority admission plugin refuses a bare ``spec.priority``)."""
    scheduling = client.SchedulingV1Api(cluster.api)
    token = secrets.token_hex(3)
    names = {"low": f"e2e-pc-{token}-low", "high": f"e2e-pc-{token}-high"}
    for level, value in (("low", 10), ("high", 1000)):
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": names[level]}}
        scheduling.create_priority_class({**body, "value": value})
    try:
        yield names
    finally:
        for name in names.values():
            try:
                scheduling.delete_priority_class(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
