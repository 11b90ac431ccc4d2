"""The console script is installed and answers --version (the package and its entry point are wired)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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


def test_the_operator_process_keeps_installed_kube_clients_out() -> None:
    """kopf imports ``kubernetes.client`` whenever it is installed (it is, in this venv): the operator's run
    blocks it first, so the process starts and measures as the image does (no such client there)."""
    import subprocess
    import sys

    code = (
        "import importlib.util, sys\n"
        "assert importlib.util.find_spec('kubernetes'), 'installed here: the block must hold even so'\n"
        "from kopf_scheduler.cli import _keep_unused_kube_clients_out\n"
        "_keep_unused_kube_clients_out()\n"
        "import kopf, kopf_scheduler.handlers, kopf_scheduler.app\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes' and sys.modules[m])\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# ---- --peering-priority-from-ordinal (the Helm chart's StatefulSet replicas) ---------------------------------


def _effective_priority(tmp_path: Path, argv: list[str]) -> int:
    from kopf_scheduler.cli import main

    out = tmp_path / "effective.yaml"
    assert main(["run", *argv, f"--write-config-to={out}"]) == 0
    return yaml.safe_load(out.read_text())["peeringPriority"]


def test_each_statefulset_ordinal_gets_its_own_peering_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    priorities = {}
    for ordinal in (0, 1, 2, 11):
        monkeypatch.setenv("POD_ID", f"rel-kopf-scheduler-{ordinal}")
        priorities[ordinal] = _effective_priority(tmp_path, ["--peering-priority-from-ordinal=100"])
    assert priorities == {0: 100, 1: 99, 2: 98, 11: 89}


def test_the_ordinal_priority_overrides_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: kopf-scheduler.io/v1alpha1\nkind: KopfSchedulerConfiguration\npeeringPriority: 7\n")
    monkeypatch.setenv("POD_ID", "kopf-scheduler-1")
    assert _effective_priority(tmp_path, [f"--config={config}", "--peering-priority-from-ordinal=10"]) == 9


@pytest.mark.parametrize("pod_id", [None, "", "no-ordinal", "kopf-scheduler-x1", "kopf-scheduler-01", "sched-"])
def test_a_pod_name_without_ordinal_is_refused(
    pod_id: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kopf_scheduler.cli import main

    if pod_id is None:
        monkeypatch.delenv("POD_ID", raising=False)
    else:
        monkeypatch.setenv("POD_ID", pod_id)
    assert main(["run", "--peering-priority-from-ordinal=100", "--write-config-to=/nonexistent/x"]) == 2
    assert f"no StatefulSet ordinal at the end of POD_ID={pod_id or ''!r}" in capsys.readouterr().err


def test_a_fixed_priority_and_the_ordinal_one_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    from kopf_scheduler.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["run", "--peering-priority=5", "--peering-priority-from-ordinal=100"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_delay_cache_until_active_is_a_flag_and_a_config_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kube-scheduler's delayCacheUntilActive (what ``convert`` reports for it): as a flag, and in the file."""
    from kopf_scheduler.cli import main

    out = tmp_path / "effective.yaml"
    assert main(["run", "--delay-cache-until-active", "true", f"--write-config-to={out}"]) == 0
    assert yaml.safe_load(out.read_text())["delayCacheUntilActive"] is True
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kopf-scheduler.io/v1alpha1\nkind: KopfSchedulerConfiguration\ndelayCacheUntilActive: true\n"
    )
    assert main(["run", f"--config={config}", "--delay-cache-until-active=false", f"--write-config-to={out}"]) == 0
    assert yaml.safe_load(out.read_text())["delayCacheUntilActive"] is False
    with pytest.raises(SystemExit):
        main(["run", "--delay-cache-until-active", "yes"])
    assert "expected true or false, got 'yes'" in capsys.readouterr().err


def _effective(tmp_path: Path, argv: list[str]) -> dict[str, object]:
    from kopf_scheduler.cli import main

    out = tmp_path / "effective.yaml"
    assert main(["run", *argv, f"--write-config-to={out}"]) == 0
    effective: dict[str, object] = yaml.safe_load(out.read_text())
    return effective


def test_kube_scheduler_command_lines_carry_over(tmp_path: Path) -> None:
    """kubeadm's kube-scheduler manifest and kube-scheduler's common flags mean the same here."""
    effective = _effective(
        tmp_path,
        [
            "--authentication-kubeconfig=/etc/kubernetes/scheduler.conf",
            "--authorization-kubeconfig=/etc/kubernetes/scheduler.conf",
            "--bind-address=127.0.0.1",
            "--leader-elect=true",
            "--secure-port=10300",
            "-v=4",
            "--logging-format=json",
            "--leader-elect-lease-duration=1m30s",
            "--leader-elect-resource-name=my-scheduler",
            "--leader-elect-resource-namespace=kube-system",
            "--leader-elect-resource-lock=leases",
        ],
    )
    assert {k: effective[k] for k in ("metricsPort", "bindAddress", "logLevel", "logFormat")} == {
        "metricsPort": 10300,
        "bindAddress": "127.0.0.1",
        "logLevel": "debug",
        "logFormat": "json",
    }
    assert (
        effective["authenticationKubeconfig"]
        == effective["authorizationKubeconfig"]
        == "/etc/kubernetes/scheduler.conf"
    )
    assert (effective["leaderElect"], effective["peeringLifetime"], effective["peeringName"]) == (
        True,
        90,
        "my-scheduler",
    )
    assert _effective(tmp_path, ["--leader-elect=false", "--v", "2"])["leaderElect"] is False
    assert _effective(tmp_path, ["--v", "2"])["logLevel"] == "info"
    assert _effective(tmp_path, ["--leader-elect"])["leaderElect"] is True


def test_kube_scheduler_leader_election_durations_set_the_renew_deadline_gate(tmp_path: Path) -> None:
    """kube-scheduler's --leader-elect-{lease-duration,renew-deadline,retry-period} (client-go's 15s/10s/2s by
    default) become the peering lifetime and the renew-deadline gate's timings (standing.py)."""
    from kopf_scheduler.settings import RunSettings

    assert RunSettings().leader_election() == (15, 10, 2)
    assert RunSettings(peering_lifetime=5).leader_election() == (5, 3.333, 1.667)  # scaled down with the lifetime
    assert RunSettings(peering_lifetime=30).leader_election() == (30, 10, 2)
    argv = ["--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=4s"]
    effective = _effective(tmp_path, argv)
    assert (effective["peeringLifetime"], effective["peeringRenewDeadline"], effective["peeringRetryPeriod"]) == (
        30,
        20.0,
        4.0,
    )
    ours = _effective(tmp_path, ["--peering-lifetime=20", "--peering-renew-deadline=12.5", "--peering-retry-period=3"])
    assert (ours["peeringRenewDeadline"], ours["peeringRetryPeriod"]) == (12.5, 3.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--leader-elect-renew-deadline=15s"], "peeringLifetime (leaseDuration) must be greater than peeringRenew"),
        (["--leader-elect-retry-period=9s"], "peeringRenewDeadline (renewDeadline) must be greater than peeringRetry"),
        (["--leader-elect-renew-deadline=1x"], "invalid duration '1x'"),
        (["--leader-elect-resource-lock=endpoints"], "--leader-elect-resource-lock=endpoints: only leases is accepted"),
        (["--leader-elect-lease-duration=1500ms"], "--leader-elect-lease-duration=1500ms: whole seconds only"),
        (["--leader-elect-lease-duration=15"], "invalid duration '15'"),
        (["--secure-port=1", "--metrics-port=2"], "metrics_port: set twice, to 2 and 1"),
        (["--leader-elect-lease-duration=1s"], "peering_lifetime: Input should be greater than or equal to 2"),
    ],
)
def test_kube_scheduler_flags_we_cannot_honour_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from kopf_scheduler.cli import main

    assert main(["run", *argv, "--write-config-to=/nonexistent/x"]) == 2
    assert message in capsys.readouterr().err


def test_a_kube_scheduler_configuration_as_config_points_to_convert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kopf_scheduler.cli import main

    config = tmp_path / "kube-scheduler.yaml"
    config.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles: []\n")
    assert main(["run", f"--config={config}", "--write-config-to=/nonexistent/x"]) == 2
    assert (
        f"is a KubeSchedulerConfiguration: its profiles become SchedulerProfiles with `kopf-scheduler convert {config}`"
        in capsys.readouterr().err
    )
