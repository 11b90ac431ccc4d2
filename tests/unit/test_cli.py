"""The console script is installed and answers --version (the package and its entry point are wired)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from kopf_scheduler._version import __version__
from tools.localcluster import kube_version


def _console_script() -> str:
    # Prefer the script next to the running interpreter (the venv), then PATH.
    candidate = Path(sys.executable).with_name("kopf-scheduler")
    found = str(candidate) if candidate.exists() else shutil.which("kopf-scheduler")
    assert found, "the kopf-scheduler console script is not installed (pip install -e .)"
    return found


def test_version_via_console_script() -> None:
    result = subprocess.run([_console_script(), "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"kopf-scheduler {__version__}")
    # The targeted kube-scheduler release must be the one pinned in tools/versions.env.
    assert f"v{kube_version()}" in result.stdout


def test_version_via_module() -> None:
    code = "import sys; from kopf_scheduler.cli import main; sys.exit(main(['--version']))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert __version__ in result.stdout


def test_the_operator_runs_on_uvloop_when_it_is_installed() -> None:
    """uvloop is a dependency on Linux; its loop and TLS transport are a measured share of the throughput."""
    import uvloop

    from kopf_scheduler.cli import _new_event_loop

    loop = _new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        assert loop is not None
        loop.close()


def test_the_operator_needs_no_kubernetes_client() -> None:
    """``kubernetes`` is a dev dependency only (tests, demo, bench): the operator must import and log in without it."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['kubernetes'] = None\n"  # any `import kubernetes` now raises ImportError
        "import kopf, kopf_scheduler.cli, kopf_scheduler.handlers, kopf_scheduler.app\n"
        "assert kopf.login_with_kubeconfig and kopf.login_with_service_account\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
