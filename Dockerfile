# The controller image: the package and its locked runtime dependencies, nothing else (no simulator
# extras, no pip, no build tools, no tests). Build and push: see docs/image.md (docker buildx, both platforms).
#
# Base: python:3.11-slim, pinned by the digest of its multi-platform index. The digest could not be read
# from a registry where this file was written (none reachable); it is the one public projects pin
# python:3.11-slim to, also via AWS's public.ecr.aws mirror of Docker Hub's library images. Check and
# refresh it with: docker buildx imagetools inspect python:3.11-slim --format '{{json .Manifest.Digest}}'
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

# ---- build stage: a venv without pip, filled by the base image's pip --------------------------------
FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN python -m venv --without-pip /opt/venv
WORKDIR /src

# Dependencies first, from the lock alone: this layer is rebuilt only when requirements.lock changes.
COPY requirements.lock ./
RUN pip --python /opt/venv/bin/python install --no-deps --only-binary=:all: -r requirements.lock

# Then the source (the package only: tests, docs and manifests are not copied).
COPY pyproject.toml README.md ./
COPY controller ./controller
RUN pip --python /opt/venv/bin/python install --no-deps --no-compile . \
    && pip --python /opt/venv/bin/python check \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib

# ---- final stage ---------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="tfjob-controller" \
      org.opencontainers.image.description="Kubernetes controller for Kubeflow TFJob (kubeflow.org/v1) with working dynamic workers" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim"

# No pip, setuptools or wheel at run time: nothing in the container can install code.
RUN python -m pip uninstall --yes --quiet pip setuptools wheel \
    && rm -f /usr/local/bin/pip*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH

COPY --from=build /opt/venv /opt/venv

# A numeric, non-root user, so Kubernetes' runAsNonRoot can verify it without a passwd lookup; it owns
# nothing in the image (the root filesystem is read-only in the Deployment anyway).
USER 65532:65532
WORKDIR /

# 8080: /metrics, 8081: /healthz and /readyz.
EXPOSE 8080 8081
ENTRYPOINT ["tfjob-controller"]
CMD ["run"]
