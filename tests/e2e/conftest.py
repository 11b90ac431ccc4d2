"""e2e tests run against a real control plane (see tests/conftest.py); every test here is marked ``e2e``.

Deselect them with ``pytest -m 'not e2e'``; point them at another cluster with ``KOPF_SCHEDULER_KUBECONFIG``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)
