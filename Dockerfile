# The operator image: the ironic-shard-operator package and its console script, nothing else.
# The same image runs the operator (`ironic-shard-operator run`, the default) and, in the kind
# end-to-end test, the member pods' nova-compute stand-in (`ironic-shard-operator
# stand-in-compute`).
#
#   docker build -t ironic-shard-operator:dev .
#
# Stage 1 builds our wheel and installs it with its dependencies into a venv that has no pip;
# stage 2 copies only that venv onto a fresh slim base: no compilers, no build files, no
# source tree, no caches. Every dependency ships a manylinux wheel, so no stage compiles.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ ./operator/
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/venv \
 && python -m pip --python /opt/venv/bin/python install --only-binary=:all: /wheels/*.whl \
 && /opt/venv/bin/ironic-shard-operator --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="ironic-shard-operator" \
      org.opencontainers.image.description="Runs nova-compute (Ironic driver) as a sharded, self-healing pool on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric uid/gid so Kubernetes can verify runAsNonRoot without a passwd lookup.
RUN groupadd --system --gid 10001 ironic-shard \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin ironic-shard
COPY --from=build /opt/venv /opt/venv
# No .pyc writes at run time: the root filesystem is read-only in the chart.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
# METRICS_PORT (/metrics) and HEALTH_PORT (/healthz) defaults.
EXPOSE 8080 8081
ENTRYPOINT ["ironic-shard-operator"]
CMD ["run"]
