"""Command line entry point: ``kopf-scheduler``.

``kopf-scheduler run`` starts the operator. As kube-scheduler does, ``--config FILE`` loads every run
setting from a versioned YAML document, explicit flags override it, and ``--write-config-to FILE`` writes
the effective settings and exits. Bad flags or a bad file fail fast with a message naming the setting.

``--peering-priority-from-ordinal BASE`` is for the Helm chart's StatefulSet: kopf peering needs a unique
priority per replica, and the ordinal that ends the pod name ($POD_ID, which kopf also uses as the peer's
identity) gives one that is stable across restarts, so replica N runs with ``BASE - N``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import ssl
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kopf_scheduler._version import __version__
from kopf_scheduler.settings import (
    RunSettings,
    SettingsError,
    dump_settings,
    kube_scheduler_overrides,
    resolve_settings,
)

if TYPE_CHECKING:
    from kopf_scheduler.web.certs import CertificateInChild

#: The kube-scheduler release whose verdicts, reasons and messages we reproduce (tools/versions.env).
TARGET_KUBE_VERSION = "1.36.3"

#: Flag dest → RunSettings field; only flags given explicitly override the config file.
_SETTING_FLAGS = {
    "namespace": "namespaces",
    "peering_name": "peering_name",
    "peering_priority": "peering_priority",
    "peering_lifetime": "peering_lifetime",
    "peering_renew_deadline": "peering_renew_deadline",
    "peering_retry_period": "peering_retry_period",
    "metrics_port": "metrics_port",
    "health_port": "health_port",
    "bind_address": "bind_address",
    "log_format": "log_format",
    "log_level": "log_level",
    "pod_initial_backoff_seconds": "pod_initial_backoff_seconds",
    "pod_max_backoff_seconds": "pod_max_backoff_seconds",
    "pod_max_in_unschedulable_pods_duration": "pod_max_in_unschedulable_pods_duration",
    "delay_cache_until_active": "delay_cache_until_active",
    "tls_cert_file": "tls_cert_file",
    "tls_private_key_file": "tls_private_key_file",
    "authorization_always_allow_paths": "authorization_always_allow_paths",
}

#: The kubectl plugin's executable: ``kubectl kopf-scheduler ...`` runs ``kubectl-kopf_scheduler ...``.
KUBECTL_PLUGIN = "kubectl-kopf_scheduler"

#: A StatefulSet pod's name ends in ``-<ordinal>``.
_ORDINAL_SUFFIX = re.compile(r"-(0|[1-9][0-9]*)\Z")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog_name(),
        description="A Kubernetes scheduler on kopf that hosts SchedulerProfile resources.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"kopf-scheduler {__version__} (kube-scheduler behaviour v{TARGET_KUBE_VERSION})",
    )
    commands = parser.add_subparsers(dest="command")
    run = commands.add_parser("run", help="run the scheduler operator", argument_default=argparse.SUPPRESS)
    run.add_argument("--config", help="load settings from this KopfSchedulerConfiguration YAML file")
    run.add_argument("--write-config-to", help="write the effective settings to this file and exit")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    run.add_argument("--namespace", action="append", help="schedule pods of this namespace only (repeatable)")
    run.add_argument("--peering-name", help="ClusterKopfPeering name (default kopf-scheduler)")
    priority = run.add_mutually_exclusive_group()
    priority.add_argument("--peering-priority", type=int, help="unique priority of this replica (default 0)")
    priority.add_argument(
        "--peering-priority-from-ordinal",
        type=int,
        metavar="BASE",
        help="priority BASE minus the StatefulSet ordinal that ends $POD_ID (the Helm chart's replicas)",
    )
    run.add_argument("--peering-lifetime", type=int, help="seconds a silent peer counts as alive (default 15)")
    run.add_argument(
        "--peering-renew-deadline",
        type=float,
        help="seconds the active replica binds after it last confirmed its standing in the peering (default 10)",
    )
    run.add_argument(
        "--peering-retry-period", type=float, help="seconds between renewals of its peering record (default 2)"
    )
    run.add_argument("--metrics-port", type=int, help="HTTPS port of /metrics and /explain, 0 disables (10259)")
    run.add_argument("--health-port", type=int, help="port of /healthz, 0 disables (default 10260)")
    run.add_argument("--bind-address", help="address of the metrics and health servers (default 0.0.0.0)")
    run.add_argument("--log-format", choices=["text", "json"], help="log format (default text)")
    run.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="(default info)")
    run.add_argument("--pod-initial-backoff-seconds", type=float, help="initial backoff (default 1)")
    run.add_argument("--pod-max-backoff-seconds", type=float, help="maximum backoff (default 10)")
    run.add_argument(
        "--pod-max-in-unschedulable-pods-duration", type=float, help="seconds before a parked pod is retried (300)"
    )
    run.add_argument(
        "--delay-cache-until-active",
        type=_true_or_false,
        metavar="true|false",
        help="a standby keeps no cache; it lists everything when it becomes active (default false)",
    )
    _add_serving_flags(run)
    _add_kube_scheduler_flags(run)
    _add_explain_command(commands)
    _add_convert_and_validate(commands)
    _add_what_if_command(commands)
    _add_completion_command(commands)
    return parser


def _true_or_false(value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")
    return value.lower() == "true"


def _prog_name() -> str:
    """``kubectl kopf-scheduler`` when run as the kubectl plugin, so usage lines show what the user typed."""
    return "kubectl kopf-scheduler" if os.path.basename(sys.argv[0]) == KUBECTL_PLUGIN else "kopf-scheduler"


# -- convert and validate: a KubeSchedulerConfiguration in, SchedulerProfiles out; offline checks --
def _add_convert_and_validate(commands: Any) -> None:
    convert = commands.add_parser(
        "convert",
        help="turn a KubeSchedulerConfiguration (v1) into SchedulerProfile manifests",
        description=(
            "Prints one SchedulerProfile per profile (for kubectl apply -f -); on stderr, what became of every "
            "field that is not part of a profile."
        ),
    )
    convert.add_argument("file", help="the KubeSchedulerConfiguration file, - for stdin")
    convert.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml", help="(default yaml)")
    validate = commands.add_parser(
        "validate",
        help="build SchedulerProfiles offline as the operator does: the pipeline, or the status error",
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="SchedulerProfile manifests, - for stdin")
    validate.add_argument("-o", "--output", choices=["text", "yaml", "json"], default="text", help="(default text)")


def _read_input(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path) as f:
        return f.read()


def convert_command(path: str, output: str) -> int:
    from kopf_scheduler.convert import ConvertError, convert_config, load_config, render_manifests, render_report

    try:
        conversion = convert_config(load_config(_read_input(path), source=path))
    except (ConvertError, OSError) as e:
        print(f"kopf-scheduler convert: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(render_manifests(conversion.manifests, output))
    sys.stderr.write(render_report(conversion))
    return 0


def validate_command(paths: Sequence[str], output: str) -> int:
    import yaml

    from kopf_scheduler.validate import ManifestError, format_verdict, load_manifests, validate_manifests

    try:
        manifests = [m for path in paths for m in load_manifests(_read_input(path), source=path)]
    except (ManifestError, OSError) as e:
        print(f"kopf-scheduler validate: {e}", file=sys.stderr)
        return 1
    verdicts = validate_manifests(manifests)
    if output == "text":
        print("\n".join(format_verdict(v) for v in verdicts))
    elif output == "json":
        print(json.dumps([v.to_api() for v in verdicts], indent=2))
    else:
        sys.stdout.write(yaml.safe_dump([v.to_api() for v in verdicts], sort_keys=False, width=120))
    return 0 if all(v.ready for v in verdicts) else 1


# -- what-if: where a pod would go on the live cluster, computed offline; reads only ------------
def _add_what_if_command(commands: Any) -> None:
    what_if = commands.add_parser(
        "what-if",
        help="where a pod would go now, and why, computed offline from the live cluster (reads only)",
        description=(
            "Lists the cluster's nodes, pods and the other objects the scheduler watches with your kubeconfig's "
            "credentials (GET and LIST only), builds the profile offline as the operator does, and runs its "
            "scheduling cycle for the pod without binding it: the node (or the tie set) with per-plugin scores, "
            "or the FailedScheduling text with each node's rejecting plugin. Without --pod, every pending pod "
            "of the profile is judged: which would schedule now. With --pod-group, a PodGroup and its pending "
            "pods are judged together as the pod-group cycle would: all placed (where) or none (why not)."
        ),
    )
    what_if.add_argument(
        "--profile", required=True, help="a SchedulerProfile manifest file (- for stdin), or a profile's NAME"
    )
    target = what_if.add_mutually_exclusive_group()
    target.add_argument("--pod", help="NAMESPACE/NAME of a pod in the cluster, or a Pod manifest file")
    target.add_argument(
        "--pod-group",
        help="NAMESPACE/NAME of a PodGroup in the cluster (its pending pods with it), or a file with one PodGroup "
        "and its pods",
    )
    what_if.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config, in-cluster)")
    what_if.add_argument("--context", help="the kubeconfig context (default: the current one)")
    what_if.add_argument("-o", "--output", choices=["text", "json"], default="text", help="(default text)")


def what_if_command(args: dict[str, Any]) -> int:
    from kopf_scheduler.kube.kubeconfig import KubeconfigError, load_credentials
    from kopf_scheduler.kube.reader import ReadError
    from kopf_scheduler.kube.remote_explain import APIServer, RemoteExplainError
    from kopf_scheduler.validate import ManifestError
    from kopf_scheduler.whatif import (
        GroupVerdict,
        WhatIfError,
        format_group_verdict,
        format_replay,
        format_verdict,
        what_if,
        what_if_pod_group,
    )

    group: GroupVerdict | None = None
    try:
        credentials = load_credentials(kubeconfig=args.get("kubeconfig"), context=args.get("context"))
        api = APIServer(credentials)
        name, spec = _what_if_profile(api, args["profile"])
        if args.get("pod_group"):
            pod_group, members = _what_if_pod_group(api, args["pod_group"], credentials.namespace)
            cluster = _read_cluster(api)
            group = what_if_pod_group(profile=name, spec=spec, cluster=cluster, pod_group=pod_group, pods=members)
        else:
            pod = _what_if_pod(api, args["pod"], credentials.namespace) if args.get("pod") else None
            cluster = _read_cluster(api)
            verdicts = what_if(profile=name, spec=spec, cluster=cluster, pod=pod)
    except (KubeconfigError, RemoteExplainError, ReadError, ManifestError, WhatIfError, OSError) as e:
        print(f"kopf-scheduler what-if: {e}", file=sys.stderr)
        return 1
    if group is not None:
        as_json = json.dumps({"profile": name, "podGroup": group.to_api()}, indent=2)
        print(as_json if args["output"] == "json" else format_group_verdict(group, name))
        return 0
    if args["output"] == "json":
        print(json.dumps({"profile": name, "pods": [v.to_api() for v in verdicts]}, indent=2))
    elif pod is not None:
        print(format_verdict(verdicts[0], name))
    else:
        print(format_replay(verdicts, name))
    return 0


def _what_if_profile(api: Any, profile: str) -> tuple[str, dict[str, Any]]:
    """(name, spec) of the SchedulerProfile in file ``profile``, else of the cluster's profile of that name."""
    from urllib.parse import quote

    from kopf_scheduler.api.crd import GROUP, KIND, PLURAL, VERSION
    from kopf_scheduler.kube.reader import get_object
    from kopf_scheduler.validate import ManifestError, load_manifests
    from kopf_scheduler.whatif import WhatIfError

    if profile == "-" or os.path.isfile(profile):
        found = [m for m in load_manifests(_read_input(profile), source=profile) if m.get("kind") == KIND]
        if len(found) != 1:
            raise ManifestError(f"{profile}: expected one {KIND}, found {len(found)}")
        manifest = found[0]
    else:
        fetched = get_object(api, f"/apis/{GROUP}/{VERSION}/{PLURAL}/{quote(profile, safe='')}")
        if fetched is None:
            raise WhatIfError(f"there is no {KIND} {profile!r} in the cluster, nor a file of that name")
        manifest = fetched
    name = (manifest.get("metadata") or {}).get("name")
    if not name:
        raise ManifestError(f"{profile}: the {KIND} has no metadata.name")
    return str(name), dict(manifest.get("spec") or {})


def _what_if_pod(api: Any, pod: str, namespace: str) -> dict[str, Any]:
    """The pod in manifest file ``pod`` (in ``namespace``, the context's, unless it names one), else the
    cluster's pod NAMESPACE/NAME."""
    from kopf_scheduler.kube.reader import get_object
    from kopf_scheduler.kube.remote_explain import pod_path
    from kopf_scheduler.validate import ManifestError, load_manifests
    from kopf_scheduler.whatif import WhatIfError

    if pod == "-" or os.path.isfile(pod):
        found = [m for m in load_manifests(_read_input(pod), source=pod) if isinstance(m, dict)]
        if len(found) != 1 or found[0].get("kind") != "Pod" or not isinstance(found[0].get("spec"), dict):
            raise ManifestError(f"{pod}: expected one Pod manifest")
        metadata = found[0].get("metadata") or {}
        return {**found[0], "metadata": {**metadata, "namespace": metadata.get("namespace") or namespace}}
    pod_namespace, sep, name = pod.partition("/")
    if not sep or not pod_namespace or not name:
        raise WhatIfError(f"--pod: expected NAMESPACE/NAME or a Pod manifest file, got {pod!r}")
    found_pod = get_object(api, pod_path(pod_namespace, name))
    if found_pod is None:
        raise WhatIfError(f"there is no pod {pod} in the cluster, nor a file of that name")
    return found_pod


def _what_if_pod_group(api: Any, pod_group: str, namespace: str) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """The PodGroup and its pods in manifest file ``pod_group`` (in ``namespace``, the context's, unless they name
    one), else the cluster's PodGroup NAMESPACE/NAME (its pods: the cluster's, None here)."""
    from urllib.parse import quote

    from kopf_scheduler.kube.reader import get_object
    from kopf_scheduler.validate import ManifestError, load_manifests
    from kopf_scheduler.whatif import WhatIfError

    def in_namespace(manifest: dict[str, Any]) -> dict[str, Any]:
        metadata = manifest.get("metadata") or {}
        return {**manifest, "metadata": {**metadata, "namespace": metadata.get("namespace") or namespace}}

    if pod_group == "-" or os.path.isfile(pod_group):
        found = [m for m in load_manifests(_read_input(pod_group), source=pod_group) if isinstance(m, dict)]
        groups = [m for m in found if m.get("kind") == "PodGroup"]
        pods = [m for m in found if m.get("kind") == "Pod" and isinstance(m.get("spec"), dict)]
        if len(groups) != 1 or len(groups) + len(pods) != len(found):
            raise ManifestError(f"{pod_group}: expected one PodGroup and Pod manifests only")
        return in_namespace(groups[0]), [in_namespace(p) for p in pods]
    group_namespace, sep, name = pod_group.partition("/")
    if not sep or not group_namespace or not name:
        raise WhatIfError(f"--pod-group: expected NAMESPACE/NAME or a manifest file, got {pod_group!r}")
    path = f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{quote(group_namespace)}/podgroups/{quote(name)}"
    found_group = get_object(api, path)
    if found_group is None:
        raise WhatIfError(f"there is no PodGroup {pod_group} in the cluster, nor a file of that name")
    return found_group, None


def _read_cluster(api: Any) -> dict[str, list[dict[str, Any]]]:
    from kopf_scheduler.kube.reader import api_resources, list_objects
    from kopf_scheduler.whatif import read_cluster

    return read_cluster(lambda path: list_objects(api, path), lambda prefix: api_resources(api, prefix))


def _add_serving_flags(run: argparse.ArgumentParser) -> None:
    """kube-scheduler's secure-serving flags, same names (web/: HTTPS, TokenReview, SubjectAccessReview)."""
    run.add_argument("--tls-cert-file", help="PEM certificate of the metrics port (default: self-signed)")
    run.add_argument("--tls-private-key-file", help="PEM private key of --tls-cert-file")
    run.add_argument(
        "--authorization-always-allow-paths",
        type=lambda value: [p for p in value.split(",") if p],
        help="comma-separated paths served without authorization (default /healthz,/readyz,/livez)",
    )


def _add_kube_scheduler_flags(run: argparse.ArgumentParser) -> None:
    """kube-scheduler's own command line, so its manifests carry over (settings.kube_scheduler_overrides maps them)."""
    flags = run.add_argument_group(
        "kube-scheduler's flags", "the same meaning under kube-scheduler's names (docs/operations.md lists them)"
    )
    flags.add_argument("--secure-port", type=int, help="= --metrics-port")
    flags.add_argument("-v", "--v", dest="verbosity", type=int, metavar="N", help="log verbosity: 4 or more is debug")
    flags.add_argument("--logging-format", choices=["text", "json"], help="= --log-format")
    flags.add_argument("--authentication-kubeconfig", help="kubeconfig of the API server that reviews tokens")
    flags.add_argument("--authorization-kubeconfig", help="kubeconfig of the API server that reviews access")
    flags.add_argument(
        "--leader-elect",
        nargs="?",
        const=True,
        type=_true_or_false,
        metavar="true|false",
        help="replicas meet in the peering and one schedules (default true); false: schedule alone",
    )
    flags.add_argument("--leader-elect-lease-duration", metavar="DURATION", help="= --peering-lifetime (e.g. 15s)")
    flags.add_argument("--leader-elect-resource-name", metavar="NAME", help="= --peering-name")
    flags.add_argument("--leader-elect-resource-namespace", metavar="NS", help="accepted; the peering is cluster-wide")
    flags.add_argument("--leader-elect-resource-lock", metavar="leases", help="only leases")
    flags.add_argument(
        "--leader-elect-renew-deadline", metavar="DURATION", help="= --peering-renew-deadline (e.g. 10s)"
    )
    flags.add_argument("--leader-elect-retry-period", metavar="DURATION", help="= --peering-retry-period (e.g. 2s)")


def _add_explain_command(commands: Any) -> None:
    explain = commands.add_parser(
        "explain",
        help="why a pending pod fits nowhere: each node's verdict and the plugin behind it",
        description=(
            "Asks the active kopf-scheduler replica for the last failed scheduling attempt of a pod. Without "
            "--url it asks the API server with your kubeconfig's credentials for the pod's PodExplanation "
            "(explain.kopf-scheduler.io/v1alpha1, the APIService the chart registers); where that API is not "
            "served it finds the active replica in the ClusterKopfPeering and asks it through pods/proxy; --url "
            "asks a replica's metrics port directly."
        ),
    )
    explain.add_argument("pod", help="NAMESPACE/NAME of the pod")
    explain.add_argument("--json", action="store_true", help="print the raw JSON account")
    explain.add_argument("--url", help="ask this metrics port URL directly (e.g. https://127.0.0.1:10259)")
    explain.add_argument("--context", help="the kubeconfig context (default: the current one)")
    explain.add_argument(
        "--peering-name", default="kopf-scheduler", help="the operator's ClusterKopfPeering (default kopf-scheduler)"
    )
    explain.add_argument(
        "--operator-namespace",
        help="namespace of the operator's pods (default: the peering object's, else the context's namespace)",
    )
    explain.add_argument("--port", type=int, help="the replica's metrics port (default: its container port 'metrics')")
    _add_explain_auth_flags(explain)


def _add_explain_auth_flags(explain: argparse.ArgumentParser) -> None:
    """Who explain is (kubeconfig user or bearer token) and how it checks the server's certificate."""
    explain.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config, in-cluster)")
    explain.add_argument("--token", help="bearer token (default: the kubeconfig's, else the pod's ServiceAccount)")
    explain.add_argument("--certificate-authority", help="verify the server's certificate with this CA file")
    explain.add_argument(
        "--insecure-skip-tls-verify", action="store_true", help="do not verify the server's certificate"
    )


def _add_completion_command(commands: Any) -> None:
    from kopf_scheduler.completion import SHELLS

    completion = commands.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description="bash: source <(kopf-scheduler completion bash); zsh: source <(kopf-scheduler completion zsh)",
    )
    completion.add_argument("shell", choices=SHELLS)


def run_explain(args: dict[str, Any]) -> int:
    """``explain``: straight to ``--url``, else through the API server to the active replica."""
    from kopf_scheduler.kube.kubeconfig import KubeconfigError

    if args.get("url"):
        try:
            token, context = _explain_credentials(args)
        except KubeconfigError as e:
            print(f"kopf-scheduler explain: {e}", file=sys.stderr)
            return 1
        return explain_pod(pod=args["pod"], url=args["url"], as_json=args["json"], token=token, ssl_context=context)
    return explain_through_api_server(args)


def explain_through_api_server(args: dict[str, Any]) -> int:
    import dataclasses

    from kopf_scheduler.explain import format_account
    from kopf_scheduler.kube.explain_api import Unserved, fetch_from_api_service
    from kopf_scheduler.kube.kubeconfig import KubeconfigError, load_credentials
    from kopf_scheduler.kube.remote_explain import APIServer, RemoteExplainError

    namespace, sep, name = args["pod"].partition("/")
    if not sep or not namespace or not name:
        print(f"kopf-scheduler explain: expected NAMESPACE/NAME, got {args['pod']!r}", file=sys.stderr)
        return 2
    try:
        credentials = load_credentials(kubeconfig=args.get("kubeconfig"), context=args.get("context"))
        if args.get("token"):
            credentials = dataclasses.replace(credentials, token=args["token"])
        if args.get("certificate_authority"):
            with open(args["certificate_authority"], "rb") as f:
                credentials = dataclasses.replace(credentials, ca_pem=f.read())
        if args.get("insecure_skip_tls_verify"):
            credentials = dataclasses.replace(credentials, insecure_skip_tls_verify=True)
        api = APIServer(credentials)
        served = fetch_from_api_service(api, namespace, name)
        if isinstance(served, Unserved):
            print(
                f"kopf-scheduler explain: {served.reason}: asking the active replica through pods/proxy",
                file=sys.stderr,
            )
            served = _explain_through_pods_proxy(api, args, credentials, namespace, name)
        status, account = served
    except (KubeconfigError, RemoteExplainError, OSError) as e:
        print(f"kopf-scheduler explain: {e}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"kopf-scheduler explain: {account.get('message') or account}", file=sys.stderr)
        return 1
    print(json.dumps(account, indent=2) if args["json"] else format_account(account))
    return 0


def _explain_through_pods_proxy(
    api: Any, args: dict[str, Any], credentials: Any, namespace: str, name: str
) -> tuple[int, dict[str, Any]]:
    """The active replica's ``/explain`` through ``pods/proxy`` (without the aggregated API)."""
    from kopf_scheduler.kube.remote_explain import fetch_explanation, find_target

    target = find_target(
        api,
        peering_name=args["peering_name"],
        namespace=namespace,
        name=name,
        operator_namespace=args.get("operator_namespace"),
        fallback_namespace=credentials.namespace,
        port=args.get("port"),
    )
    return fetch_explanation(api, target, token=credentials.token, peering_name=args["peering_name"])


def run_completion(args: dict[str, Any]) -> int:
    from kopf_scheduler.completion import completion_script

    parser = build_parser()
    parser.prog = "kopf-scheduler"  # the script completes the command's name, not "kubectl kopf-scheduler"
    print(completion_script(args["shell"], parser, commands=[KUBECTL_PLUGIN]), end="")
    return 0


def explain_pod(
    *, pod: str, url: str, as_json: bool, token: str | None = None, ssl_context: ssl.SSLContext | None = None
) -> int:
    import urllib.error
    import urllib.parse
    import urllib.request

    from kopf_scheduler.explain import format_account

    namespace, sep, name = pod.partition("/")
    if not sep or not namespace or not name:
        print(f"kopf-scheduler explain: expected NAMESPACE/NAME, got {pod!r}", file=sys.stderr)
        return 2
    endpoint = f"{url.rstrip('/')}/explain/{urllib.parse.quote(namespace)}/{urllib.parse.quote(name)}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        request = urllib.request.Request(endpoint, headers=headers)
        with urllib.request.urlopen(request, timeout=10, context=ssl_context) as response:
            account = json.loads(response.read())
    except urllib.error.HTTPError as e:
        try:
            detail = json.loads(e.read() or b"{}").get("message")  # ours, or the API server's Status
        except (ValueError, AttributeError):  # not our endpoint's JSON (a wrong --url)
            detail = None
        print(f"kopf-scheduler explain: {detail or e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"kopf-scheduler explain: cannot reach {endpoint}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(account, indent=2) if as_json else format_account(account))
    return 0


def _explain_credentials(args: dict[str, Any]) -> tuple[str | None, ssl.SSLContext]:
    """The bearer token (flag, kubeconfig user, in-cluster ServiceAccount) and the TLS client context."""
    context = ssl.create_default_context(cafile=args.get("certificate_authority"))
    if args.get("insecure_skip_tls_verify"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    from kopf_scheduler.kube.kubeconfig import user_token

    token = args.get("token") or user_token(kubeconfig=args.get("kubeconfig"), context=args.get("context"))
    return token or _service_account_token(), context


def _service_account_token() -> str | None:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/token") as f:
            return f.read().strip()
    except OSError:
        return None


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _configure_logging(settings: RunSettings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level.upper())
    # kopf logs every handled watch event at INFO ("Handler 'pod_event' succeeded"): thousands per second
    # under load. Its warnings and errors still come through.
    logging.getLogger("kopf").setLevel(max(logging.WARNING, root.level))
    # ... except peering: "Pausing operations in favour of ..." / "Resuming operations" say which replica is active.
    from kopf_scheduler.kopf_hooks import peering_logger

    peering_logger().setLevel(root.level)
    # Every /healthz and /metrics request would be an access-log line.
    logging.getLogger("aiohttp.access").setLevel(max(logging.WARNING, root.level))


def run(settings: RunSettings, *, notices: Sequence[str] = ()) -> int:
    # The metrics port's own key, when it needs one, is made by a child process from the first moment (up to a
    # second or two): kopf runs the port's start-up handler before it starts watching.
    self_signed = _start_self_signed_certificate(settings)
    _keep_unused_kube_clients_out()
    import kopf
    from prometheus_client import disable_created_metrics

    from kopf_scheduler import handlers  # noqa: F401 — importing registers the handlers
    from kopf_scheduler.app import SchedulerApp
    from kopf_scheduler.kopf_hooks import KopfVersionError, check_kopf_version
    from kopf_scheduler.kube import HTTPExtenderTransport

    try:
        check_kopf_version()
    except KopfVersionError as e:
        print(f"kopf-scheduler: {e}", file=sys.stderr)
        return 2
    _configure_logging(settings)
    for notice in notices:
        logging.getLogger("kopf_scheduler").info("%s", notice)
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves this one unannotated
    identity = peering_identity()
    app = SchedulerApp(settings=settings, extender_transport=HTTPExtenderTransport(), identity=identity)
    liveness = f"http://{settings.bind_address}:{settings.health_port}/healthz" if settings.health_port else None
    kopf.run(
        loop=_new_event_loop(),
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        peering_name=settings.peering_name,
        priority=settings.peering_priority,
        standalone=not settings.leader_elect,
        identity=identity,  # type: ignore[arg-type]  # kopf's Identity is a NewType of str that kopf does not export
        liveness_endpoint=liveness,
        memo=kopf.Memo(app=app, self_signed_certificate=self_signed),
    )
    return 0


def peering_identity() -> str:
    """This replica's identity in the peering, given to kopf and to the renew-deadline gate alike: ``$POD_ID`` (the
    chart's pod name), else one made as kopf makes it (``user@host/timestamp/random``)."""
    pod = os.environ.get("POD_ID")
    if pod:
        return pod
    import datetime
    import getpass
    import secrets
    import socket

    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d%H%M%S")
    return f"{getpass.getuser()}@{socket.gethostname()}/{now}/{secrets.token_hex(2)}"


#: Client libraries kopf imports whenever they are installed, to recognise their objects; the operator talks
#: HTTP through ``kube/`` and logs in with kopf's own kubeconfig and service-account code.
_UNUSED_KUBE_CLIENTS = ("kubernetes", "kubernetes_asyncio", "pykube")


def _keep_unused_kube_clients_out() -> None:
    """Make ``import kubernetes`` (and the other clients) fail in the operator process.

    kopf imports ``kubernetes.client`` whenever the package is installed (its third-party helpers do):
    ≈ 0.2 s of start-up and 12 MiB of RSS for nothing we use. The image has no such client, but a
    development environment (the venv of the tests and benchmarks) or a user's own image may have one;
    the process then measures and behaves as the image does. A ``None`` entry in ``sys.modules`` is
    Python's documented way to make an import raise ``ImportError``, which kopf expects.
    """
    for name in _UNUSED_KUBE_CLIENTS:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]  # None: the documented "cannot import" entry


def _start_self_signed_certificate(settings: RunSettings) -> CertificateInChild | None:
    """The metrics port's key in the making when it serves without given files, else None."""
    if not settings.metrics_port or (settings.tls_cert_file and settings.tls_private_key_file):
        return None
    import socket

    from kopf_scheduler.web.certs import CertificateInChild, certificate_names, serving_hosts

    hosts = serving_hosts(socket.gethostname(), settings.bind_address)
    return CertificateInChild.start(certificate_names(hosts))


def _new_event_loop() -> asyncio.AbstractEventLoop | None:
    """uvloop when it is installed (a dependency on Linux), else None: kopf then runs asyncio's own loop.

    The operator is one event loop doing TLS requests and JSON watch streams all day; uvloop's loop and TLS
    transport cut its CPU per scheduled pod noticeably (docs/benchmarks.md). kopf's own CLI picks uvloop the
    same way; ``kopf.run()`` leaves it to the caller.
    """
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop()


def priority_from_ordinal(base: int, pod_name: str) -> int:
    """``base`` minus the StatefulSet ordinal at the end of ``pod_name`` (``sched-kopf-scheduler-2`` → base - 2)."""
    match = _ORDINAL_SUFFIX.search(pod_name)
    if match is None:
        raise SettingsError(
            f"--peering-priority-from-ordinal: no StatefulSet ordinal at the end of POD_ID={pod_name!r}"
        )
    return base - int(match.group(1))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    command = args.pop("command", None)
    if command == "explain":
        return run_explain(args)
    if command == "completion":
        return run_completion(args)
    if command == "convert":
        return convert_command(args["file"], args["output"])
    if command == "validate":
        return validate_command(args["files"], args["output"])
    if command == "what-if":
        return what_if_command(args)
    if command != "run":
        parser.print_help()
        return 0 if command is None else 2
    if "kubeconfig" in args:
        os.environ["KUBECONFIG"] = args.pop("kubeconfig")
    overrides = {_SETTING_FLAGS[k]: v for k, v in args.items() if k in _SETTING_FLAGS}
    try:
        if "peering_priority_from_ordinal" in args:
            base = args["peering_priority_from_ordinal"]
            overrides["peering_priority"] = priority_from_ordinal(base, os.environ.get("POD_ID", ""))
        kube_scheduler, notices = kube_scheduler_overrides(args, overrides)
        settings = resolve_settings(config_file=args.get("config"), overrides={**overrides, **kube_scheduler})
    except SettingsError as e:
        print(f"kopf-scheduler: {e}", file=sys.stderr)
        return 2
    if "write_config_to" in args:
        with open(args["write_config_to"], "w") as f:
            f.write(dump_settings(settings))
        return 0
    return run(settings, notices=notices)
