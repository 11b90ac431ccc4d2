"""The watched kinds' table (``watched.py``) against what else names them: the chart's ClusterRole, the cluster
events of ``framework/events.py``, the kinds ``cache.objects`` stores.

The ClusterRole is read from the chart's template itself (its template expressions replaced by placeholders), so
the check runs without helm; ``tests/unit/test_chart.py`` renders the chart with helm and compares every rule.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from kopf_scheduler.framework.events import EventResource
from kopf_scheduler.handlers import GROUP, PLURAL
from kopf_scheduler.state.objects import KINDS
from kopf_scheduler.watched import BY_KIND, WATCHED_KINDS, Feed, of_feed

RBAC_TEMPLATE = Path(__file__).parents[2] / "charts" / "kopf-scheduler" / "templates" / "rbac.yaml"
#: What kopf itself lists and watches: the SchedulerProfiles (its change handlers and daemons), CRDs (its
#: resource scanning) and the peering objects.
KOPFS_OWN = {
    (GROUP, PLURAL),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("kopf.dev", "clusterkopfpeerings"),
}


def _template_documents(path: Path) -> list[Any]:
    """The YAML documents of a Helm template, its comments dropped and its expressions replaced by a placeholder."""
    text = re.sub(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", "", path.read_text(), flags=re.DOTALL)
    text = re.sub(r"\{\{.*?\}\}", "templated", text)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _cluster_role_verbs() -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) → the verbs the operator's ClusterRole grants on every object of it."""
    [role] = [doc for doc in _template_documents(RBAC_TEMPLATE) if doc["kind"] == "ClusterRole"]
    verbs: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        if rule.get("resourceNames"):
            continue
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs.setdefault((group, resource), set()).update(rule["verbs"])
    return verbs


def test_the_chart_lets_the_operator_list_and_watch_exactly_the_watched_kinds() -> None:
    """list and watch for every row (kopf's watch and our reconciling LIST), get where the row says so, and
    list/watch on nothing else but what kopf itself watches."""
    verbs = _cluster_role_verbs()
    for watched in WATCHED_KINDS:
        granted = verbs.get((watched.group, watched.plural), set())
        assert {"list", "watch"} <= granted, watched.kind
        assert ("get" in granted) == watched.get, watched.kind
    listed = {resource for resource, granted in verbs.items() if {"list", "watch"} & granted}
    assert listed - KOPFS_OWN == {(watched.group, watched.plural) for watched in WATCHED_KINDS}


def test_the_template_reader_sees_the_cluster_role() -> None:
    verbs = _cluster_role_verbs()
    # patch: the decisions written on a pod after a failed attempt (spec.explain.annotations, decisions.py)
    assert verbs[("", "pods")] == {"get", "list", "watch", "delete", "patch"}
    assert ("kopf.dev", "clusterkopfpeerings") in verbs


def test_the_table_agrees_with_the_cluster_events_and_the_object_store() -> None:
    """A row's ``cluster_event`` names one of upstream's EventResources; ``cache.objects`` holds the OBJECTS rows."""
    for watched in of_feed(Feed.OBJECTS):
        if watched.cluster_event:
            assert EventResource(watched.event_resource).value == watched.event_resource
    assert dict(KINDS) == {watched.kind: watched.namespaced for watched in of_feed(Feed.OBJECTS)}
    assert len(BY_KIND) == len(WATCHED_KINDS)
    assert [watched.kind for watched in WATCHED_KINDS][-1] == "Pod"  # what-if feeds pods after what they refer to
    assert BY_KIND["CSINode"].path == "/apis/storage.k8s.io/v1/csinodes"
    assert BY_KIND["Pod"].namespace_path("ns") == "/api/v1/namespaces/ns/pods"
