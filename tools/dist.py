"""``make dist``: the release artifacts in ``dist/``, all of the package's one version.

Why one command: what users install (a wheel, a chart, an image) must be the tree that `make test` tested,
with the versions agreeing, or an install mixes releases. This writes, for version ``V``
(``operator/kopf_scheduler/_version.py``):

- ``kopf_scheduler-V.tar.gz`` and ``kopf_scheduler-V-py3-none-any.whl``: ``python -m build`` (the sdist, then
  the wheel built from it), the build backend pinned by constraints.txt through ``PIP_CONSTRAINT``.
- ``kopf-scheduler-V.tgz``: ``helm package`` of charts/kopf-scheduler with chart version and appVersion ``V``.
- ``kopf-scheduler-image-V.tar``: ``podman save`` (docker-archive: ``docker load``, ``podman load``,
  ``kind load image-archive`` and ``skopeo copy docker-archive:...`` all read it) of the image `make image`
  built, named ``<the chart's image.repository>:V``, so a loaded archive is what the chart runs by default.
  The name is only written into the archive: the local image store keeps just `make image`'s tag.
- ``kopf-scheduler-image-V.cdx.json``: a CycloneDX SBOM of the image's Python environment (every
  distribution in its venv, with versions, licences and package URLs) by cyclonedx-py, read from the
  image's own ``*.dist-info`` (copied out of a container, into an empty venv cyclonedx-py inspects), plus
  the image as the BOM's subject. The Debian base's packages are not in it.
- ``SHA256SUMS``: ``sha256sum -c`` checks the rest.

A stale image (its version label differs from ``V``) stops the run: `make image` first (the Makefile's
``dist`` target does). tests/e2e/test_dist.py installs and runs every artifact.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
CHART = REPO_ROOT / "charts" / "kopf-scheduler"
DIST = REPO_ROOT / "dist"
#: Where the SBOM's stand-in environment is made (``make clean`` removes build/).
SBOM_WORK = REPO_ROOT / "build" / "sbom"
#: The image's venv (the Dockerfile's /opt/kopf-scheduler): its interpreter names its site-packages.
IMAGE_PYTHON = "/opt/kopf-scheduler/bin/python"
PURELIB = "import sysconfig; print(sysconfig.get_path('purelib'))"


def package_version() -> str:
    namespace: dict[str, Any] = {}
    exec((REPO_ROOT / "operator" / "kopf_scheduler" / "_version.py").read_text(), namespace)
    return str(namespace["__version__"])


def chart_repository() -> str:
    """The chart's default image.repository: the name the image archive carries."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return str(values["image"]["repository"])


def artifact_names(version: str) -> dict[str, str]:
    """Every file ``make dist`` writes for ``version``, by kind."""
    return {
        "sdist": f"kopf_scheduler-{version}.tar.gz",
        "wheel": f"kopf_scheduler-{version}-py3-none-any.whl",
        "chart": f"kopf-scheduler-{version}.tgz",
        "image": f"kopf-scheduler-image-{version}.tar",
        "sbom": f"kopf-scheduler-image-{version}.cdx.json",
        "sums": "SHA256SUMS",
    }


def run(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    print("+", " ".join(args), flush=True)
    return subprocess.run(args, check=True, **kwargs)


def tool(name: str) -> str:
    """A pinned binary (``make binaries``' KOPF_SCHEDULER_BIN_DIR) before PATH's."""
    bin_dir = os.environ.get("KOPF_SCHEDULER_BIN_DIR")
    if bin_dir and (Path(bin_dir) / name).exists():
        return str(Path(bin_dir) / name)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"dist: {name} not found (make binaries / make image-tools install it)")
    return found


def build_python_packages(out: Path) -> None:
    env = {**os.environ, "PIP_CONSTRAINT": str(REPO_ROOT / "constraints.txt")}
    run(sys.executable, "-m", "build", "--quiet", "--outdir", str(out), str(REPO_ROOT), env=env)


def package_chart(out: Path, version: str) -> None:
    run(tool("helm"), "package", str(CHART), "--version", version, "--app-version", version, "--destination", str(out))


def image_labels(podman: str, image: str) -> dict[str, str]:
    inspect = subprocess.run([podman, "image", "inspect", image], capture_output=True, text=True, check=False)
    if inspect.returncode != 0:
        raise SystemExit(f"dist: no image {image}: run `make image`")
    return dict(json.loads(inspect.stdout)[0]["Config"]["Labels"] or {})


def save_image(podman: str, image: str, name: str, path: Path) -> None:
    """``image`` into a docker-archive at ``path`` under ``name``; the store keeps only its own tags."""
    had_name = subprocess.run([podman, "image", "exists", name], check=False).returncode == 0
    if not had_name:
        run(podman, "tag", image, name)
    try:
        run(podman, "save", "--quiet", "--format", "docker-archive", "--output", str(path), name)
    finally:
        if not had_name:
            run(podman, "untag", image, name)


def image_site_packages(podman: str, image: str, target: Path) -> None:
    """The ``*.dist-info`` directories of the image's venv, unpacked into ``target``."""
    script = f'cd "$({IMAGE_PYTHON} -c "{PURELIB}")" && tar -cf - *.dist-info'
    tar = run(podman, "run", "--rm", "--entrypoint", "/bin/sh", image, "-c", script, stdout=subprocess.PIPE).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(target, filter="data")


def write_sbom(podman: str, image: str, name: str, version: str, path: Path) -> None:
    """cyclonedx-py over an empty venv holding only the image's distribution metadata."""
    shutil.rmtree(SBOM_WORK, ignore_errors=True)
    env_dir = SBOM_WORK / "env"
    run(sys.executable, "-m", "venv", "--without-pip", str(env_dir))
    purelib = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", PURELIB], capture_output=True, text=True, check=True
    ).stdout.strip()
    image_site_packages(podman, image, Path(purelib))
    run(sys.executable, "-m", "cyclonedx_py", "environment", "--mc-type", "application", "--output-reproducible",
        "--spec-version", "1.6", "--output-file", str(path), str(env_dir))  # fmt: skip
    bom = json.loads(path.read_text())
    image_id = json.loads(subprocess.run([podman, "image", "inspect", image], capture_output=True, check=True).stdout)
    bom["metadata"]["component"] = {
        "type": "container",
        "bom-ref": "kopf-scheduler-image",
        "name": name,
        "version": version,
        "description": "The kopf-scheduler operator image (make image); components: its Python venv",
        "properties": [{"name": "kopf-scheduler:image-id", "value": f"sha256:{image_id[0]['Id']}"}],
    }
    path.write_text(json.dumps(bom, indent=2) + "\n")
    shutil.rmtree(SBOM_WORK, ignore_errors=True)


def write_sums(out: Path, names: Sequence[str]) -> None:
    lines = []
    for name in names:
        digest = hashlib.sha256()
        with (out / name).open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        lines.append(f"{digest.hexdigest()}  {name}\n")
    (out / "SHA256SUMS").write_text("".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--image", required=True, help="the image `make image` built (localhost/kopf-scheduler:V)")
    parser.add_argument("--out", type=Path, default=DIST)
    args = parser.parse_args(argv)
    version = package_version()
    podman = tool("podman")
    labels = image_labels(podman, args.image)
    if labels.get("org.opencontainers.image.version") != version:
        raise SystemExit(f"dist: {args.image} is version {labels.get('org.opencontainers.image.version')}, "
                         f"the tree {version}: run `make image`")  # fmt: skip
    names = artifact_names(version)
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    build_python_packages(args.out)
    package_chart(args.out, version)
    release_name = f"{chart_repository()}:{version}"
    save_image(podman, args.image, release_name, args.out / names["image"])
    write_sbom(podman, args.image, chart_repository(), version, args.out / names["sbom"])
    produced = sorted(p.name for p in args.out.iterdir())
    expected = sorted(n for kind, n in names.items() if kind != "sums")
    if produced != expected:
        raise SystemExit(f"dist: wrote {produced}, expected {expected}")
    write_sums(args.out, produced)
    print(f"dist: {args.out} ({version}, image {release_name}):")
    for name in [*produced, names["sums"]]:
        print(f"  {name}  {(args.out / name).stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
