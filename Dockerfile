# The controller image: the package and its runtime dependencies only (no simulator extras).
# Build: docker build -t tfjob-controller:0.1.0 .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY controller ./controller
# pip byte-compiles what it installs, so a read-only root filesystem costs nothing at run time.
RUN pip install . && rm -rf /src

# A numeric, non-root user, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 65532 tfjob \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin tfjob
USER 65532:65532
WORKDIR /

# 8080: /metrics, 8081: /healthz and /readyz.
EXPOSE 8080 8081
ENTRYPOINT ["tfjob-controller"]
CMD ["run"]
