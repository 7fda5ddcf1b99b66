# syntax=docker/dockerfile:1
# mcphost as a container: `docker build -t mcphost .` (add `--build-arg WITH_CLIS=1` for the Claude Code and
# Codex CLIs the bundled harness runners drive). Run it with compose.yaml (PostgreSQL) or alone (SQLite under
# /data): `docker run -e MCPHOST_API_KEY=... -p 8787:8787 -v mcphost-data:/data mcphost`.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.13.9

FROM ${UV_IMAGE} AS uv

# -- build: the locked environment, without dev tools ------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT=/app/.venv
WORKDIR /src
# Dependencies first, so that a source change does not reinstall them.
COPY pyproject.toml uv.lock ./
RUN --mount=type=cache,target=/root/.cache/uv uv sync --locked --no-dev --no-install-project
COPY README.md LICENSE ./
COPY mcphost ./mcphost
COPY mcphost_runners ./mcphost_runners
COPY mcphost_bridge ./mcphost_bridge
RUN --mount=type=cache,target=/root/.cache/uv uv sync --locked --no-dev --no-editable

# -- clis: the pinned Claude Code and Codex CLIs (package.json), only with WITH_CLIS=1 -----------------------
FROM ${PYTHON_IMAGE} AS clis
ARG WITH_CLIS=0
WORKDIR /app
COPY package.json package-lock.json ./
RUN mkdir -p node_modules/.bin \
 && if [ "$WITH_CLIS" = "1" ]; then \
      apt-get update && apt-get install -y --no-install-recommends nodejs npm ca-certificates \
      && npm ci --omit=dev --no-audit --no-fund && rm -rf /var/lib/apt/lists/* /root/.npm; \
    fi

# -- runtime: the virtual environment and a user without privileges ----------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 mcphost \
 && useradd --system --uid 10001 --gid mcphost --home-dir /data --shell /usr/sbin/nologin mcphost \
 && mkdir -p /data && chown mcphost:mcphost /data
COPY --from=build /app/.venv /app/.venv
COPY --from=clis /app/node_modules /app/node_modules
ENV PATH="/app/.venv/bin:/app/node_modules/.bin:$PATH" \
    PYTHONUNBUFFERED=1 \
    MCPHOST_DATA_DIR=/data \
    MCPHOST_LISTEN=0.0.0.0:8787
USER mcphost
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8787
# /healthz: 200 when serving, 503 while draining or while the database or data_dir is unavailable.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8787/healthz', timeout=2).status == 200 else 1)"]
# A non-loopback listen needs MCPHOST_API_KEY: the server refuses to start without one.
CMD ["mcphost", "serve"]
