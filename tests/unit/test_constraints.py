"""constraints.txt pins every Python package the project installs (the image, the dev/CI venv, hadolint).

Why: pip treats a constraints file as "if this package is installed, use this version"; a dependency added
to pyproject.toml without `make lock` would silently float in the image and in CI. This test names it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[2]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


def _makefile_lint_tools() -> list[str]:
    match = re.search(r"^LINT_TOOLS := (.+)$", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, "Makefile: LINT_TOOLS missing"
    return match.group(1).split()


def _project() -> dict[str, Any]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def test_every_direct_requirement_is_pinned_within_its_range() -> None:
    project = _project()
    requirements = [
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["dev"],
        *project["build-system"]["requires"],
        *_makefile_lint_tools(),
    ]
    pins = _pins()
    for text in requirements:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in constraints.txt: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {requirement.name}=={pins[name]}, outside pyproject's {requirement.specifier}"
        )


def test_the_project_itself_is_not_pinned() -> None:
    assert "kopf-scheduler" not in _pins()
