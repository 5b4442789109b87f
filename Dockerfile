# syntax=docker/dockerfile:1
# The scheduler daemon as an image. Build: docker build -t scheduler:0.1.0 .
# Run:  docker run -e SCHEDULER_DATABASE_URL=postgresql://user:password@host/db scheduler:0.1.0
# Job modules are imported from /app: mount or copy your package there and name it with
# SCHEDULER_JOBS=<package> (the image runs no jobs until you do: it exits 2 and says so).
# The example jobs are at /opt/scheduler-examples/jobs, off the import path; run them
# only on purpose, with SCHEDULER_JOBS=/opt/scheduler-examples/jobs (compose.yaml does).
# No secrets are baked in: pass the database URL at run time.

# ---- build: the pinned dependencies and the project's wheel in a virtual environment
FROM python:3.13-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY requirements-build.lock requirements.lock ./
RUN --mount=type=cache,target=/root/.cache/pip \
    python -m venv /opt/build \
    && /opt/build/bin/pip install --require-hashes --only-binary :all: -r requirements-build.lock \
    && python -m venv /opt/scheduler \
    && /opt/scheduler/bin/pip install --require-hashes --only-binary :all: -r requirements.lock
COPY pyproject.toml README.md ./
COPY scheduler/ scheduler/
COPY migrations/ migrations/
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /src/dist . \
    && /opt/scheduler/bin/pip install --no-deps --no-index /src/dist/cronclaim-*.whl \
    && /opt/scheduler/bin/pip check

# ---- runtime: the virtual environment, the job modules, a non-root user
FROM python:3.13-slim AS runtime
# The version is pyproject.toml's: tests/unit/test_distribution.py keeps this label equal
# to it, and tests/unit/test_readme.py its description as exact as the README's.
LABEL org.opencontainers.image.title="scheduler" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.description="A cron daemon for Python replicas: each period's body runs to completion at most once; one whose node died mid-run runs again as its next attempt; effects through ctx.once happen exactly once." \
      org.opencontainers.image.licenses="MIT"
RUN groupadd --system --gid 10001 scheduler \
    && useradd --system --uid 10001 --gid scheduler --home-dir /var/lib/scheduler \
        --no-create-home --shell /usr/sbin/nologin scheduler \
    && install --directory --owner=scheduler --group=scheduler --mode=0750 /var/lib/scheduler
COPY --from=build /opt/scheduler /opt/scheduler
WORKDIR /app
COPY jobs/ /opt/scheduler-examples/jobs/
# SQLite in /var/lib/scheduler is the fallback for a single container; replicas
# share PostgreSQL through SCHEDULER_DATABASE_URL given at run time.
ENV PATH="/opt/scheduler/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH=/app \
    SCHEDULER_DATABASE_URL=sqlite:////var/lib/scheduler/scheduler.db \
    SCHEDULER_LOG_FORMAT=json \
    SCHEDULER_HTTP=0.0.0.0:9464
# The SQLite fallback's folder is a volume: its runs outlive the container (docker run
# -v scheduler-data:/var/lib/scheduler), and an image built FROM this one that switches
# to `USER root` to install more must switch back to `USER 10001:10001` after.
VOLUME ["/var/lib/scheduler"]
USER 10001:10001
EXPOSE 9464
# The daemon's own /healthz where it listens (its --http, else SCHEDULER_HTTP; healthy
# with a line saying so when that is empty), no curl in a slim image: scheduler/healthcheck.py.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "scheduler.healthcheck"]
ENTRYPOINT ["scheduler"]
CMD ["run"]
