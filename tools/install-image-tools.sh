#!/usr/bin/env bash
# What `make image` needs on a fresh Debian/Ubuntu machine, from the distribution's own packages: podman to
# build and run the image without a daemon, runc as its runtime (deploy/containers.conf says why), uidmap
# for its user namespaces (plus slirp4netns and fuse-overlayfs for rootless use), and mmdebstrap for the
# bookworm base image (tools/build-base-image.sh). Installs them when one is missing; without apt-get (or
# root/sudo), says what to install and fails.
set -euo pipefail

declare -A wanted=([podman]=podman [runc]=runc [newuidmap]=uidmap [mmdebstrap]=mmdebstrap)
missing=()
for command in "${!wanted[@]}"; do
    command -v "$command" >/dev/null 2>&1 || missing+=("${wanted[$command]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
missing+=(slirp4netns fuse-overlayfs)

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if ! command -v apt-get >/dev/null 2>&1 || { [ -n "$sudo" ] && ! command -v sudo >/dev/null 2>&1; }; then
    echo "install-image-tools: please install ${missing[*]} (Debian package names)" >&2
    exit 1
fi
echo "install-image-tools: apt-get install ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
