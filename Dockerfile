# The operator image: the ironic-shard-operator package and its console script, nothing else.
# The same image runs the operator (`ironic-shard-operator run`, the default) and, in the kind
# end-to-end test, the member pods' nova-compute stand-in (`ironic-shard-operator
# stand-in-compute`).
#
#   docker build -t ironic-shard-operator:dev .
#
# Reproducible: the base image is pinned by digest (python:3.11-slim-bookworm, an OCI index
# for every platform it has), and every Python dependency comes from requirements/image.lock,
# pinned with the sha256 of each file (`make lock` writes it; pip refuses anything else with
# --require-hashes). Our own wheel is built with the base image's setuptools, without
# downloading a build environment. docs/releasing.md says how to move both pins.
#
# Stage 1 installs the lock into a venv that has no pip, then our wheel; stage 2 copies only
# that venv onto the same slim base: no compilers, no build files, no source tree, no caches.
# Every dependency ships a manylinux wheel, so no stage compiles.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# The dependencies first: this layer stays cached until the lock changes.
COPY requirements/image.lock ./requirements/image.lock
RUN python -m venv --without-pip /opt/venv \
 && python -m pip --python /opt/venv/bin/python install --require-hashes --only-binary=:all: --no-deps \
        -r requirements/image.lock
COPY pyproject.toml README.md ./
COPY operator/ ./operator/
RUN python -m pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && python -m pip --python /opt/venv/bin/python install --no-deps --no-index /wheels/*.whl \
 && python -m pip --python /opt/venv/bin/python check \
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
