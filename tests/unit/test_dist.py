"""What `make dist` (tools/dist.py) names, and the files that must agree with it.

Why: a release's names are read in several places (the chart's default image, deploy/plugins.Dockerfile's
default base, the README's install section). A version bump or a new registry path that misses one of them
gives users a base or a command that does not exist; these tests name the one that drifted. The artifacts
themselves are installed and run in tests/e2e/test_dist.py.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from kopf_scheduler._version import __version__
from tools.dist import REPO_ROOT, artifact_names, chart_repository, package_version, write_sums


def test_the_version_is_the_package_version() -> None:
    assert package_version() == __version__


def test_the_plugins_dockerfile_builds_on_this_release_by_default() -> None:
    text = (REPO_ROOT / "deploy" / "plugins.Dockerfile").read_text()
    match = re.search(r"^ARG KOPF_SCHEDULER_IMAGE=(\S+)$", text, re.MULTILINE)
    assert match, "deploy/plugins.Dockerfile: ARG KOPF_SCHEDULER_IMAGE=<default> missing"
    assert match.group(1) == f"{chart_repository()}:{__version__}"


def test_the_readme_installs_from_these_artifacts() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index("## Installing with Helm") :]
    for kind, name in artifact_names(__version__).items():
        assert name in section, f"README's install section does not name the {kind}, {name}"
    assert f"helm install kopf-scheduler dist/{artifact_names(__version__)['chart']}" in section
    assert f"{chart_repository()}:{__version__}" in section


def test_the_wheel_and_sdist_names_follow_the_packaging_specifications() -> None:
    names = artifact_names("1.2.3")
    # PEP 427/491 and the sdist specification: the normalized project name, underscores for dashes.
    assert names["wheel"] == "kopf_scheduler-1.2.3-py3-none-any.whl"
    assert names["sdist"] == "kopf_scheduler-1.2.3.tar.gz"
    assert names["chart"] == "kopf-scheduler-1.2.3.tgz"  # helm package: <chart name>-<version>.tgz


def test_sha256sums_are_in_sha256sum_format(tmp_path: Path) -> None:
    (tmp_path / "a.whl").write_bytes(b"wheel")
    (tmp_path / "b.tgz").write_bytes(b"chart")
    write_sums(tmp_path, ["a.whl", "b.tgz"])
    lines = (tmp_path / "SHA256SUMS").read_text().splitlines()
    assert lines == [
        f"{hashlib.sha256(b'wheel').hexdigest()}  a.whl",
        f"{hashlib.sha256(b'chart').hexdigest()}  b.tgz",
    ]
