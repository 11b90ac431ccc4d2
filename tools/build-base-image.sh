#!/usr/bin/env bash
# The Debian bookworm base image that `make image` builds on when no registry is reachable (no Docker Hub on
# the project's machines): mmdebstrap makes a minimal root filesystem with python3 and python3-venv from the
# Debian mirror, `podman import` turns it into an image. Users with a registry build on python:3.11-slim
# instead (the Dockerfile's default PYTHON_IMAGE).
#
# The tarball is cached under $CACHE_DIR/image/ keyed by the suite and package list, so a warm run only
# re-imports it (`podman import` of ~40 MiB) if the image is missing. Prints the image reference.
set -euo pipefail

SUITE=bookworm
PACKAGES=python3,python3-venv
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
CACHE_DIR=${KOPF_SCHEDULER_CACHE:-$HOME/.cache/kopf-scheduler}

key=$(printf '%s\n' "$SUITE" "$PACKAGES" "$MIRROR" "$SECURITY_MIRROR" | sha256sum | cut -c1-12)
image=localhost/kopf-scheduler-base:$SUITE-$key
tarball=$CACHE_DIR/image/base-$SUITE-$key.tar

if podman image exists "$image"; then
    echo "$image"
    exit 0
fi
if [ ! -s "$tarball" ]; then
    mkdir -p "$(dirname "$tarball")"
    echo "build-base-image: mmdebstrap $SUITE with $PACKAGES into $tarball" >&2
    # minbase: essential + apt only; docs, man pages and translations are left out of the image.
    mmdebstrap --quiet --variant=minbase --format=tar --include="$PACKAGES" \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        "$SUITE" "$tarball.tmp" \
        "deb $MIRROR $SUITE main" \
        "deb $MIRROR $SUITE-updates main" \
        "deb $SECURITY_MIRROR $SUITE-security main" >&2
    mv "$tarball.tmp" "$tarball"
fi
podman import --quiet \
    --change 'CMD ["/usr/bin/python3"]' \
    --change 'ENV LANG=C.UTF-8' \
    "$tarball" "$image" >&2
echo "$image"
