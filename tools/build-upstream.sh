#!/usr/bin/env bash
# Build the pinned upstream binaries (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# etcd, kwok) from the Go module proxy into ~/.cache/kopf-scheduler/<KUBE_VERSION>/bin.
#
# Why wrapper modules: `go install k8s.io/kubernetes/cmd/...@vX` is refused because k8s.io/kubernetes's
# go.mod has replace directives pointing at ./staging; etcd's server module has the same problem.
# A throwaway main module that requires the upstream module and replaces each staging module with its
# published v0.Y.Z tag builds the exact release. Nothing built here is ever committed.
#
# Also writes kwok-stages.yaml (kwok's default Stage objects, from the same pinned kwok module) next to them.
# Skips every binary that is already present, so warm runs cost nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache=${KOPF_SCHEDULER_CACHE:-$HOME/.cache/kopf-scheduler}/$KUBE_VERSION
bin=$cache/bin
src=$cache/src
mkdir -p "$bin" "$src"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

have_all() { for b in "$@"; do [ -x "$bin/$b" ] || return 1; done; }
log() { printf '[build-upstream] %s\n' "$*" >&2; }

if ! command -v go >/dev/null; then
  echo "build-upstream: Go is required to build the pinned upstream binaries (none found on PATH)" >&2
  exit 1
fi

# --- Kubernetes: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl -----------------------
kube_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
if ! have_all "${kube_bins[@]}"; then
  start=$(date +%s)
  staging_version=0.${KUBE_VERSION#1.}
  minor=${KUBE_VERSION#1.}; minor=${minor%%.*}
  w=$src/kubernetes
  mkdir -p "$w"
  cd "$w"
  if [ ! -f go.mod ]; then
    go mod init local/kopf-scheduler-k8s-bins >/dev/null 2>&1
    # The upstream go.mod names the GODEBUG defaults its binaries run with; only the main module's line counts.
    upstream_mod=$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
    go_line=$(awk '$1=="go"{print $2; exit}' "$upstream_mod")
    godebug=$(awk '$1=="godebug"{print $2; exit}' "$upstream_mod")
    go mod edit -go="$go_line"
    [ -n "$godebug" ] && go mod edit -godebug="$godebug"
    # Every staging module upstream replaces must be replaced here too, or resolution fails on v0.0.0.
    for m in $(awk '$2=="=>" && $3 ~ /^\.\/staging\// {print $1}' "$upstream_mod"); do
      go mod edit -replace="$m=$m@v$staging_version"
    done
    go get "k8s.io/kubernetes@v$KUBE_VERSION"
  fi
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags="$ldflags -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  for b in "${kube_bins[@]}"; do
    [ -x "$bin/$b" ] && continue
    log "building $b v$KUBE_VERSION"
    go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags="$ldflags" -o "$bin/$b.tmp" "k8s.io/kubernetes/cmd/$b"
    mv "$bin/$b.tmp" "$bin/$b"
  done
  log "kubernetes binaries took $(( $(date +%s) - start ))s"
fi

# --- etcd ---------------------------------------------------------------------------------------------
if ! have_all etcd; then
  start=$(date +%s)
  w=$src/etcd
  mkdir -p "$w"
  cd "$w"
  if [ ! -f go.mod ]; then
    go mod init local/kopf-scheduler-etcd-bin >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  fi
  log "building etcd v$ETCD_VERSION"
  go build -trimpath -ldflags="-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$bin/etcd.tmp" "$bin/etcd"
  log "etcd took $(( $(date +%s) - start ))s"
fi

# --- kwok ---------------------------------------------------------------------------------------------
if ! have_all kwok; then
  start=$(date +%s)
  log "building kwok v$KWOK_VERSION"
  GOBIN="$src/kwok-bin" go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
  mv "$src/kwok-bin/kwok" "$bin/kwok"
  log "kwok took $(( $(date +%s) - start ))s"
fi

# --- kwok stages ------------------------------------------------------------------------------------
# kwok >= 0.8 has no built-in default stages when run on its own ("no stages found"); kwokctl writes them
# into the config it generates. Do the same: concatenate the stages kwokctl's binary runtime uses
# (node-initialize, node-heartbeat-with-lease, pod-ready/complete/delete) from the pinned kwok module.
if [ ! -f "$bin/kwok-stages.yaml" ]; then
  kwok_dir=$(cd "$src" && go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
  stages=$kwok_dir/kustomize/stage
  {
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      echo "---"
      cat "$stages/$f"
    done
  } >"$bin/kwok-stages.yaml.tmp"
  mv "$bin/kwok-stages.yaml.tmp" "$bin/kwok-stages.yaml"
  log "kwok stages written to $bin/kwok-stages.yaml"
fi

log "binaries ready in $bin"
