"""``kopf-scheduler completion bash|zsh``: the scripts complete what the parser accepts, in a real shell."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kopf_scheduler import cli
from kopf_scheduler.completion import completion_script


def script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["completion", shell]) == 0
    return capsys.readouterr().out


def complete(words: list[str], script_text: str) -> list[str]:
    """What bash offers for ``words`` (the last one being completed), with the script sourced."""
    line = " ".join(words)
    program = (
        f"{script_text}\n"
        f"COMP_WORDS=({line})\n"
        + ('COMP_WORDS+=("")\n' if not words[-1] else "")
        + "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
        "_kopf_scheduler_complete\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return sorted(w for w in done.stdout.splitlines() if w)


def test_bash_completes_subcommands_flags_and_choices(capsys: pytest.CaptureFixture[str]) -> None:
    bash = script("bash", capsys)
    assert "complete -o default -F _kopf_scheduler_complete kopf-scheduler" in bash
    assert "complete -o default -F _kopf_scheduler_complete kubectl-kopf_scheduler" in bash
    subcommands = complete(["kopf-scheduler", ""], bash)
    assert {"run", "explain", "completion"} <= set(subcommands)
    assert complete(["kopf-scheduler", "ex"], bash) == ["explain"]
    explain_flags = complete(["kopf-scheduler", "explain", "--"], bash)
    assert {"--url", "--context", "--kubeconfig", "--peering-name", "--operator-namespace", "--json"} <= set(
        explain_flags
    )
    assert "--metrics-port" not in explain_flags  # run's, not explain's
    assert complete(["kopf-scheduler", "run", "--log-format", ""], bash) == ["json", "text"]
    assert complete(["kopf-scheduler", "completion", ""], bash) == ["bash", "zsh"]


def test_zsh_is_the_bash_function_under_bashcompinit(capsys: pytest.CaptureFixture[str]) -> None:
    zsh = script("zsh", capsys)
    assert zsh.startswith("#compdef kopf-scheduler\n")
    assert "bashcompinit" in zsh
    assert "_kopf_scheduler_complete()" in zsh
    if shutil.which("zsh"):
        subprocess.run(["zsh", "-c", zsh], check=True, capture_output=True)


def test_the_script_follows_the_parser() -> None:
    parser = cli.build_parser()
    parser.prog = "kopf-scheduler"
    run = next(a for a in parser._actions if a.dest == "command").choices["run"]  # type: ignore[index]
    run.add_argument("--brand-new-flag")
    assert "--brand-new-flag" in completion_script("bash", parser)
    with pytest.raises(ValueError, match="only bash, zsh"):
        completion_script("fish", parser)
