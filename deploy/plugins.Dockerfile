# kopf-scheduler with more plugins: the released image plus Python packages (from PyPI, or wheels in the build
# context) that declare plugins in the entry-point group `kopf_scheduler.plugins` (docs/plugins.md). The
# operator loads them at start-up; a profile then enables them by name.
#
#   podman build -f deploy/plugins.Dockerfile --build-arg EXTRA_PACKAGES="my-plugins==1.2" \
#       -t REGISTRY/kopf-scheduler-plugins:0.1.0 deploy/
#   helm install ... --set image.repository=REGISTRY/kopf-scheduler-plugins --set image.tag=0.1.0
#
# A local wheel: put it into the build context (the last argument) and name it relative to it,
# e.g. `--build-arg EXTRA_PACKAGES=./my_plugins-1.2-py3-none-any.whl` with the wheel's directory as context.
# KOPF_SCHEDULER_IMAGE picks the base (default: the release this file came with; a loaded `make dist`
# archive provides it); `--secret id=ca,src=<CA bundle>` hands pip a CA where TLS is intercepted, as for
# the main Dockerfile.
#
# Why not `pip install` in the image: the image's venv has no pip (the Dockerfile removes it; nothing installs
# at run time). A throwaway pip from the interpreter's own ensurepip installs into that venv (`pip --python`)
# and is deleted in the same step. Packages kopf-scheduler already has stay at the image's versions (pip
# upgrades nothing that satisfies the plugin's requirements). The build fails if an entry point does not load
# (kopf-scheduler's registry checks each, as the operator would at start-up).
ARG KOPF_SCHEDULER_IMAGE=ghcr.io/kopf-scheduler/kopf-scheduler:0.1.0
FROM ${KOPF_SCHEDULER_IMAGE}
ARG EXTRA_PACKAGES
USER 0:0
# DL3013: the versions are the caller's (EXTRA_PACKAGES); SC2086: it is a list of words; DL3003: /context is
# a bind mount of this one step, not a directory of the image.
# hadolint ignore=DL3003,DL3013,SC2086
RUN --mount=type=bind,target=/context --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && : "${EXTRA_PACKAGES:?the packages to add, as pip requirement specifiers}" \
    && python3 -m venv /tmp/pip \
    && cd /context \
    && /tmp/pip/bin/pip --python /opt/kopf-scheduler/bin/python install --no-cache-dir --disable-pip-version-check \
        --root-user-action=ignore ${EXTRA_PACKAGES} \
    && rm -rf /tmp/pip \
    && /opt/kopf-scheduler/bin/python -c "from kopf_scheduler.plugins import registry as r; \
print('plugins added:', *sorted(set(r.discover()) - set(r.in_tree_registry())))"
USER 10001:10001
