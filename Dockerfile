# The kopf-scheduler operator image: `kopf-scheduler run` as a non-root user in a Python 3.11 venv.
#
#   docker build -t <registry>/kopf-scheduler:0.1.0 .      # the tag = the chart's appVersion
#   docker push <registry>/kopf-scheduler:0.1.0
#
# `make image` builds the same file with podman as localhost/kopf-scheduler:<version>, on a Debian bookworm
# base made by mmdebstrap (tools/build-base-image.sh) since the project's machines reach no image registry:
#   podman build --build-arg PYTHON_IMAGE=localhost/kopf-scheduler-base:... --secret id=ca,src=<CA bundle> .
#
# PYTHON_IMAGE is any Debian-based image with python3 and its venv module (python:3.11-slim-bookworm, or
# Debian's python3 + python3-venv). Two stages: the first installs the package and its dependencies, at the
# versions pinned in constraints.txt, into a venv at /opt/kopf-scheduler (Debian's python forbids pip
# outside a venv); the second copies only that venv, so no sources, wheels or caches end up in the image.
# The helm chart runs it with a read-only root filesystem, uid 10001 (below), all capabilities dropped:
# Pod Security "restricted".
#
# Where outbound TLS is intercepted, hand pip the CA bundle as a build secret (`--secret id=ca,src=...`):
# it is mounted for the one RUN that needs it and never stored in a layer. Without it pip uses its own.
# (RUN --mount needs BuildKit: Docker's default builder since 23.0, and podman/buildah.)
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# Only what the package is built from (README.md is its long description) and the pins.
COPY constraints.txt pyproject.toml README.md ./
COPY operator/ operator/
# The build backend (setuptools) is pinned by constraints.txt too: PIP_CONSTRAINT reaches pip's isolated
# build environment, a -c option would not. pip and setuptools leave the venv afterwards: nothing at run time
# installs packages.
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && export PIP_CONSTRAINT=/src/constraints.txt \
    && python3 -m venv /opt/kopf-scheduler \
    && /opt/kopf-scheduler/bin/python -m pip install . \
    && /opt/kopf-scheduler/bin/python -m pip uninstall --yes pip setuptools \
    && /opt/kopf-scheduler/bin/kopf-scheduler --version

FROM ${PYTHON_IMAGE}
# VERSION and REVISION come from `make image` (the package version and the git commit).
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="kopf-scheduler" \
      org.opencontainers.image.description="A Kubernetes scheduler on kopf that hosts kube-scheduler profiles as SchedulerProfile resources" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/kopf-scheduler /opt/kopf-scheduler
RUN groupadd --gid 10001 kopf-scheduler \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin kopf-scheduler
# pip compiled the .pyc files at build time: the root filesystem is read-only at run time.
ENV PATH=/opt/kopf-scheduler/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# Numeric, so the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
# /metrics and kopf's /healthz (kopf-scheduler run --metrics-port / --health-port).
EXPOSE 10259 10260
ENTRYPOINT ["kopf-scheduler", "run"]
