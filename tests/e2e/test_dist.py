"""The release artifacts of `make dist` (tools/dist.py), installed and run as a user would.

Why: a release is what users get, not the tree. These tests take ``dist/`` as `make dist` left it (the
Makefile's ``test`` target makes it after the image, so nothing is built twice) and check that

- every artifact is there, SHA256SUMS holds, and wheel, sdist, chart (version and appVersion), image archive
  (its name and version label) and SBOM all carry the package's version; the SBOM lists the image venv's
  distributions at the versions constraints.txt pins;
- the wheel installs into a fresh venv (dependencies from the index, pinned by constraints.txt) and its CLI
  runs: ``kopf-scheduler --version`` and ``validate`` of the repository's example profiles;
- the image archive loads into podman under the chart's default image name (the name is removed first, so
  only the archive can bring it back) and runs (``--version``); the packaged chart installs into the local
  control plane, and the loaded image, run as that installed StatefulSet's pod template says (as
  tests/e2e/test_image.py runs it), makes a profile Ready and binds a pod;
- deploy/plugins.Dockerfile adds a plugin package (examples/plugins, built into a wheel here) to the loaded
  image: its entry points are registered (``validate`` of a profile using them passes in that image and fails
  in the plain one) while the image still runs as uid 10001.

A missing or stale dist/ fails with the hint to run `make dist`.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from packaging.utils import canonicalize_name

from kopf_scheduler._version import __version__
from tests.conftest import Cluster, NodeFactory
from tests.e2e.operator_process import (
    delete_profile,
    operator_command,
    pod_manifest,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)
from tests.e2e.test_helm import CHART_CRDS, Release, _established, _release_objects
from tests.e2e.test_image import (
    CONTAINERS_CONF,
    container_log,
    free_port,
    podman,
    podman_run_args,
    run_container,
    service_account_dir,
)
from tests.unit.test_constraints import _pins
from tools.aggregation import register_operator, unregister_operator, wait_available
from tools.dist import artifact_names, chart_repository

REPO_ROOT = Path(__file__).resolve().parents[2]
DIST = Path(os.environ.get("KOPF_SCHEDULER_DIST", REPO_ROOT / "dist"))
NAMES = artifact_names(__version__)
#: The name the archive carries: the chart's default image.
RELEASE_IMAGE = f"{chart_repository()}:{__version__}"
PLUGIN_PROFILE = """\
apiVersion: kopf-scheduler.io/v1alpha1
kind: SchedulerProfile
metadata: {name: gpu-pool}
spec:
  plugins:
    filter: {enabled: [{name: RequireNodeLabel}]}
    score: {enabled: [{name: FewestPods, weight: 2}]}
  pluginConfig:
    - {name: RequireNodeLabel, args: {key: pool, values: [gpu]}}
"""


def dist_file(kind: str) -> Path:
    return DIST / NAMES[kind]


@pytest.fixture(scope="module")
def dist() -> Path:
    missing = [name for name in NAMES.values() if not (DIST / name).is_file()]
    if missing:
        pytest.fail(f"{DIST} lacks {missing}: run `make dist`")
    for line in dist_file("sums").read_text().splitlines():
        digest, name = line.split("  ", 1)
        assert hashlib.sha256((DIST / name).read_bytes()).hexdigest() == digest, f"SHA256SUMS: {name} differs"
    return DIST


def test_every_artifact_carries_the_package_version(dist: Path) -> None:
    with zipfile.ZipFile(dist_file("wheel")) as wheel:
        metadata = wheel.read(f"kopf_scheduler-{__version__}.dist-info/METADATA").decode()
    assert f"\nVersion: {__version__}\n" in metadata
    with tarfile.open(dist_file("sdist")) as sdist:
        pkg_info = sdist.extractfile(f"kopf_scheduler-{__version__}/PKG-INFO")
        assert pkg_info is not None
        assert f"\nVersion: {__version__}\n" in pkg_info.read().decode()
    with tarfile.open(dist_file("chart")) as chart:
        chart_yaml = chart.extractfile("kopf-scheduler/Chart.yaml")
        assert chart_yaml is not None
        meta = yaml.safe_load(chart_yaml)
        packaged_values = chart.extractfile("kopf-scheduler/values.yaml")
        assert packaged_values is not None
        assert yaml.safe_load(packaged_values)["image"]["repository"] == chart_repository()
    assert (meta["version"], meta["appVersion"]) == (__version__, __version__)

    with tarfile.open(dist_file("image")) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        (entry,) = manifest
        config = json.load(archive.extractfile(entry["Config"]))  # type: ignore[arg-type]
    assert entry["RepoTags"] == [RELEASE_IMAGE]
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == __version__

    bom = json.loads(dist_file("sbom").read_text())
    assert (bom["bomFormat"], bom["specVersion"]) == ("CycloneDX", "1.6")
    subject = bom["metadata"]["component"]
    assert (subject["type"], subject["name"], subject["version"]) == ("container", chart_repository(), __version__)
    listed = {canonicalize_name(c["name"]): c["version"] for c in bom["components"]}
    assert listed.pop("kopf-scheduler") == __version__
    pins = _pins()
    assert {"kopf", "numpy", "pydantic", "cryptography"} <= set(listed)
    assert {name: version for name, version in listed.items() if pins.get(name) != version} == {}
    assert "pip" not in listed, "the image's venv has no pip"


def test_the_wheel_installs_into_a_fresh_venv_and_its_cli_runs(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {**os.environ, "PIP_CONSTRAINT": str(REPO_ROOT / "constraints.txt"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)  # only the venv's own packages
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile", str(dist_file("wheel"))],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    cli = str(venv / "bin" / "kopf-scheduler")
    version = subprocess.run([cli, "--version"], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert version.stdout.startswith(f"kopf-scheduler {__version__} ")
    located = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import kopf_scheduler; print(kopf_scheduler.__file__)"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=True,
    )  # fmt: skip
    assert located.stdout.startswith(str(venv)), "kopf_scheduler imported from outside the fresh venv"
    examples = sorted(str(p) for p in (REPO_ROOT / "examples" / "profiles").glob("*.yaml"))
    validate = subprocess.run([cli, "validate", *examples], capture_output=True, text=True, env=env, timeout=120)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    verdicts = [line for line in validate.stdout.splitlines() if not line.startswith(" ")]
    assert len(verdicts) == len(examples)
    assert all(": Ready (PipelineBuilt)" in line for line in verdicts), verdicts


@pytest.fixture(scope="module")
def loaded_image(dist: Path) -> Iterator[str]:
    """The archive loaded into podman; the chart's default image name exists only through it."""
    if podman("image", "exists", RELEASE_IMAGE, check=False).returncode == 0:
        podman("untag", RELEASE_IMAGE, RELEASE_IMAGE)  # the name only: `make image`'s image stays
    loaded = podman("load", "--input", str(dist_file("image")), timeout=600)
    assert f"Loaded image: {RELEASE_IMAGE}" in loaded.stdout + loaded.stderr
    yield RELEASE_IMAGE
    podman("untag", RELEASE_IMAGE, RELEASE_IMAGE, check=False)


def test_the_loaded_image_runs_as_the_packaged_chart_installs_it(
    cluster: Cluster, namespace: str, kwok_nodes: NodeFactory, loaded_image: str, tmp_path: Path
) -> None:
    labels = json.loads(podman("image", "inspect", loaded_image).stdout)[0]["Config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__
    version = podman("run", "--rm", "--entrypoint", "kopf-scheduler", loaded_image, "--version")
    assert version.stdout.startswith(f"kopf-scheduler {__version__} ")

    release = Release(f"kd{secrets.token_hex(3)}", namespace, cluster.kubeconfig, tmp_path / "helm")
    release.helm_home.mkdir()
    profile = release.profile()
    container = f"{release.name}-0"
    values = {"replicas": 1, "peering": {"name": release.peering}, "profiles": [{"name": profile}],
              "metrics": {"port": free_port()}, "health": {"port": free_port()}}  # fmt: skip
    values_file = tmp_path / "values.json"
    values_file.write_text(json.dumps(values))
    try:
        release.helm("install", release.name, str(dist_file("chart")), "--values", str(values_file))
        for crd in CHART_CRDS:
            wait_for(lambda crd=crd: _established(cluster.api, crd), timeout=30, message=f"CRD {crd} not Established")
        objects = _release_objects(cluster, release)
        assert all(objects.values()), {kind: obj is not None for kind, obj in objects.items()}
        (listed,) = json.loads(release.helm("list", "--filter", release.name, "--output", "json").stdout)
        assert (listed["chart"], listed["app_version"]) == (f"kopf-scheduler-{__version__}", __version__)
        template = cluster.api.sanitize_for_serialization(objects["StatefulSet"].spec.template.spec)
        assert template["containers"][0]["image"] == loaded_image  # the chart's default: the archive's name

        # The installed pod template, run from the loaded image (kwok runs no containers: podman does).
        server = cluster.api.configuration.host
        secrets_dir = service_account_dir(cluster, release, release.fullname, tmp_path / "sa", server)
        pod_name = f"{release.fullname}-0"
        options = podman_run_args(template, pod_name, secrets_dir, server, in_cluster=False, pod_namespace=namespace)
        run_container(loaded_image, container, options, template["containers"][0]["args"], detach=True)
        node = kwok_nodes(cpu="4", memory="8Gi", pods="20")
        wait_profile_status(cluster.api, profile, ready=True, timeout=90)
        cluster.core.create_namespaced_pod(namespace, pod_manifest("from-dist", profile, cpu="500m"))
        assert wait_pods_bound(cluster.core, namespace, ["from-dist"], timeout=60)["from-dist"] == node

        # The README's last step: `kopf-scheduler explain` with the cluster's kubeconfig, through the API server
        # (the chart's APIService; kwok runs no pods, so its Service here names localhost, where the container
        # listens: tools/aggregation.py says why).
        cluster.core.create_namespaced_pod(namespace, pod_manifest("too-big", profile, cpu="64"))
        register_operator(cluster.api, port=values["metrics"]["port"])
        wait_available(cluster.api, timeout=90)
        reason = "0/1 nodes are available: 1 Insufficient cpu."
        command = [*operator_command(), "explain", f"{namespace}/too-big", "--kubeconfig", str(cluster.kubeconfig)]

        def explained() -> bool:
            answer = subprocess.run(command, capture_output=True, text=True, timeout=60)
            return answer.returncode == 0 and reason in answer.stdout

        wait_for(explained, timeout=60, message=f"explain of {namespace}/too-big never said {reason!r}")
    except BaseException:
        print(f"---- podman logs {container}\n{container_log(container, tail=80)}")
        raise
    finally:
        podman("rm", "--force", "--time", "0", container, check=False)
        release.uninstall_without_hooks()  # no kubelet here for the pre-delete Job (test_helm_lifecycle.py runs it)
        delete_profile(cluster.api, profile, force=True)
        unregister_operator(cluster.api)


def test_an_image_with_extra_plugins_from_the_plugins_dockerfile(loaded_image: str, tmp_path: Path) -> None:
    context = tmp_path / "context"
    env = {**os.environ, "PIP_CONSTRAINT": str(REPO_ROOT / "constraints.txt")}
    # Built from a copy: setuptools leaves build/ and an .egg-info beside the sources, and an .egg-info under
    # examples/plugins/src would register the example plugins in every later test that puts src on sys.path.
    source = tmp_path / "plugins"
    shutil.copytree(REPO_ROOT / "examples" / "plugins", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(context), str(source)],
        capture_output=True, env=env, timeout=300, check=True,
    )  # fmt: skip
    (wheel,) = (p.name for p in context.glob("*.whl"))
    tag = f"localhost/kopf-scheduler-plugins-test:{secrets.token_hex(3)}"
    build = podman(
        "build", "--pull=never", "--file", str(REPO_ROOT / "deploy" / "plugins.Dockerfile"),
        "--build-arg", f"KOPF_SCHEDULER_IMAGE={loaded_image}", "--build-arg", f"EXTRA_PACKAGES=./{wheel}",
        "--tag", tag, str(context), timeout=600,
    )  # fmt: skip
    try:
        assert "plugins added: FewestPods RequireNodeLabel" in build.stdout
        config = json.loads(podman("image", "inspect", tag).stdout)[0]["Config"]
        assert config["User"] == "10001:10001"
        assert config["Entrypoint"] == ["kopf-scheduler", "run"]
        with_plugins = _validate_in(tag, PLUGIN_PROFILE)
        assert with_plugins.returncode == 0, with_plugins.stdout + with_plugins.stderr
        assert "gpu-pool: Ready (PipelineBuilt)" in with_plugins.stdout
        assert "RequireNodeLabel" in with_plugins.stdout
        assert "FewestPods:2" in with_plugins.stdout
        plain = _validate_in(loaded_image, PLUGIN_PROFILE)
        assert plain.returncode == 1
        assert 'FilterPlugin "RequireNodeLabel" does not exist' in plain.stdout
    finally:
        podman("rmi", "--force", tag, check=False)


def _validate_in(image: str, manifest: str) -> subprocess.CompletedProcess[str]:
    """``kopf-scheduler validate -`` in ``image``, the manifest on stdin, as the image's uid."""
    env = {**os.environ, "CONTAINERS_CONF": CONTAINERS_CONF}
    command = ["podman", "run", "--rm", "-i", "--read-only", "--entrypoint", "kopf-scheduler", image, "validate", "-"]
    return subprocess.run(command, input=manifest, capture_output=True, text=True, env=env, timeout=120, check=False)
