# The kopf-scheduler operator image: `kopf-scheduler run` as a non-root user on a slim Python 3.11.
#
#   docker build -t <registry>/kopf-scheduler:0.1.0 .      # the tag = the chart's appVersion
#   docker push <registry>/kopf-scheduler:0.1.0
#
# Two stages: the first builds the package's wheel from this repository (pyproject.toml + operator/), the
# second installs that wheel and its dependencies from PyPI into a clean interpreter, so no build tools,
# sources or caches end up in the image. The helm chart runs it with a read-only root filesystem, uid
# 10001 (below), all capabilities dropped: Pod Security "restricted".
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel is built from (README.md is the package's long description).
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl \
    && rm -rf /wheels \
    && groupadd --system --gid 10001 kopf-scheduler \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin kopf-scheduler
# Numeric, so the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
# /metrics and kopf's /healthz (kopf-scheduler run --metrics-port / --health-port).
EXPOSE 10259 10260
ENTRYPOINT ["kopf-scheduler", "run"]
