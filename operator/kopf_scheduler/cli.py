"""Command line entry point: ``kopf-scheduler``.

Sub-commands are added as the operator grows; ``--version`` reports the package version and the
upstream Kubernetes release whose kube-scheduler behaviour this build targets.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kopf_scheduler._version import __version__

#: The kube-scheduler release whose verdicts, reasons and messages we reproduce (tools/versions.env).
TARGET_KUBE_VERSION = "1.36.3"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kopf-scheduler",
        description="A Kubernetes scheduler on kopf that hosts SchedulerProfile resources.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"kopf-scheduler {__version__} (kube-scheduler behaviour v{TARGET_KUBE_VERSION})",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0
