"""Shell completion scripts for an argparse command line (``kopf-scheduler completion bash|zsh``).

kubectl, helm and kube-scheduler's cobra commands print their completion script with ``completion SHELL``;
this does the same from the argparse parser itself, so a new subcommand or flag is completed without a
second list to keep in sync, and without a dependency (argcomplete would run Python on every <Tab>). The
script is static: subcommands, each subcommand's flags, and a flag's ``choices`` where it has them;
file names elsewhere. The zsh script is the bash one under zsh's ``bashcompinit``, as ``kubectl completion
zsh`` did for years.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable

SHELLS = ("bash", "zsh")


def _function_name(prog: str) -> str:
    return "_" + re.sub(r"[^A-Za-z0-9_]", "_", prog) + "_complete"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(s for a in parser._actions for s in a.option_strings if s.startswith("--"))


def _choices(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Flag → its values, for flags with ``choices``."""
    return {
        s: [str(c) for c in a.choices]
        for a in parser._actions
        if a.choices and a.option_strings and not isinstance(a.choices, dict)
        for s in a.option_strings
    }


def _positional_choices(parser: argparse.ArgumentParser) -> list[str]:
    return [
        str(c)
        for a in parser._actions
        if not a.option_strings and a.choices and not isinstance(a, argparse._SubParsersAction)
        for c in a.choices
    ]


def _words(values: Iterable[str]) -> str:
    return " ".join(values)


def bash_script(parser: argparse.ArgumentParser, commands: Iterable[str] = ()) -> str:
    """A bash completion function for ``parser.prog`` and every name in ``commands`` (e.g. the kubectl plugin)."""
    prog = parser.prog
    function = _function_name(prog)
    subcommands = _subcommands(parser)
    lines = [
        f"# bash completion for {prog}; load with: source <({prog} completion bash)",
        f"{function}() {{",
        "    local cur prev sub i",
        '    cur="${COMP_WORDS[COMP_CWORD]}"',
        '    prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    sub=""',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        case "${COMP_WORDS[i]}" in',
        f'            {"|".join(subcommands) or "__none__"}) sub="${{COMP_WORDS[i]}}"; break ;;',
        "        esac",
        "    done",
        '    case "$sub" in',
    ]
    for name, sub in subcommands.items():
        lines.append(f"        {name})")
        choices = _choices(sub)
        if choices:
            lines.append('            case "$prev" in')
            for flag, values in choices.items():
                lines.append(
                    f'                {flag}) COMPREPLY=($(compgen -W "{_words(values)}" -- "$cur")); return ;;'
                )
            lines.append("            esac")
        positional = _positional_choices(sub)
        lines += [
            '            if [[ "$cur" == -* ]]; then',
            f'                COMPREPLY=($(compgen -W "{_words(_flags(sub))}" -- "$cur"))',
            "            else",
            f'                COMPREPLY=($(compgen -W "{_words(positional)}" -- "$cur"))'
            if positional
            else '                COMPREPLY=($(compgen -f -- "$cur"))',
            "            fi",
            "            ;;",
        ]
    lines += [
        "        *)",
        f'            COMPREPLY=($(compgen -W "{_words([*subcommands, *_flags(parser)])}" -- "$cur"))',
        "            ;;",
        "    esac",
        "}",
    ]
    for command in [prog, *commands]:
        lines.append(f"complete -o default -F {function} {command}")
    return "\n".join(lines) + "\n"


def zsh_script(parser: argparse.ArgumentParser, commands: Iterable[str] = ()) -> str:
    """The bash function under zsh's bashcompinit (``source <(prog completion zsh)`` in ~/.zshrc)."""
    return (
        f"#compdef {parser.prog}\n"
        "autoload -U +X compinit && { (( $+functions[compdef] )) || compinit; }\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser, commands)
    )


def completion_script(shell: str, parser: argparse.ArgumentParser, commands: Iterable[str] = ()) -> str:
    if shell == "bash":
        return bash_script(parser, commands)
    if shell == "zsh":
        return zsh_script(parser, commands)
    raise ValueError(f"no completion for shell {shell!r} (only {', '.join(SHELLS)})")
