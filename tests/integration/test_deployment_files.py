"""The deployment files agree with the code, without Docker or a cluster: the Dockerfile,
compose.yaml, compose.celery.yaml and deploy/kubernetes/ are parsed, and every command,
flag and SCHEDULER_* variable they use is parsed by the real click commands."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import tomllib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit
from zoneinfo import ZoneInfo

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from scheduler import healthcheck
from scheduler.cron import parse_schedule
from scheduler.durations import parse_duration
from tests import dockerfile
from tests.cli_model import accepted_envvars, check_invocation, resolve

ROOT = Path(__file__).parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
IMAGE = f"scheduler:{VERSION}"
KUBERNETES = ROOT / "deploy" / "kubernetes"
PLACEHOLDER = "from-the-cluster"  # a value Kubernetes fills in (Secret, pod name)

STAGES = dockerfile.parse()
RUNTIME = STAGES[-1]
IMAGE_ENV = RUNTIME.env()


def _image_uid() -> int:
    user = RUNTIME.last("USER").text.split(":")[0]
    assert user.isdigit(), "USER must be numeric so Kubernetes can verify runAsNonRoot"
    return int(user)


def _checked(argv: list[str], declared: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Check ARGV under the image's environment plus DECLARED; every declared SCHEDULER_*
    variable must be one the command reads (the image's are filtered, as they apply to
    every command and are ignored by those that do not read them)."""
    _, command, _ = resolve(argv)
    inherited = {k: v for k, v in IMAGE_ENV.items() if k in accepted_envvars(command)}
    return check_invocation(argv, {**inherited, **declared}, monkeypatch)


# -- Dockerfile ------------------------------------------------------------------------


def test_the_image_is_built_in_stages_on_python_3_13_slim() -> None:
    assert len(STAGES) >= 2
    assert {stage.base for stage in STAGES} == {"python:3.13-slim"}
    builders = {stage.name for stage in STAGES[:-1]}
    copied = [dockerfile.copy_arguments(item)[0].get("from") for item in RUNTIME.all("COPY")]
    assert builders & set(copied), "the final stage copies nothing from a build stage"
    assert not RUNTIME.all("RUN") or all(
        "pip install" not in dockerfile.run_command(item) for item in RUNTIME.all("RUN")
    ), "dependencies are installed in the build stage, not the runtime stage"


def test_dependencies_come_from_the_hashed_locks() -> None:
    commands = " ".join(dockerfile.run_command(item) for item in STAGES[0].all("RUN"))
    for lock in ("requirements.lock", "requirements-build.lock"):
        assert re.search(rf"--require-hashes [^&]*-r {re.escape(lock)}", commands), lock
    assert "--no-deps" in commands, "the project itself must not pull unpinned dependencies"
    assert "pip check" in commands


@pytest.mark.parametrize(
    ("lock", "requirements"),
    [
        ("requirements.lock", PYPROJECT["project"]["dependencies"]),
        ("requirements-build.lock", PYPROJECT["build-system"]["requires"]),
        (
            "requirements-celery.lock",
            PYPROJECT["project"]["dependencies"]
            + PYPROJECT["project"]["optional-dependencies"]["celery"],
        ),
    ],
)
def test_the_locks_pin_every_dependency_with_hashes(lock: str, requirements: list[str]) -> None:
    pins = _pins(ROOT / lock)
    stale = []
    for line in requirements:
        wanted = Requirement(line)
        pinned = pins.get(canonicalize_name(wanted.name))
        if pinned is None or pinned not in wanted.specifier:
            stale.append(f"{wanted.name} (pyproject: {line}, lock: {pinned})")
        stale += [
            f"{extra.name} (for {line})"
            for extra in _extra_requirements(wanted)
            if canonicalize_name(extra.name) not in pins
        ]
    assert not stale, f"{lock} is out of date, run scripts/lock: {stale}"


def _extra_requirements(wanted: Requirement) -> list[Requirement]:
    """What `name[extra]` adds, and what the extras among those add in turn (celery[redis]
    brings kombu[redis], which brings redis and packaging), read from the installed
    distributions' metadata (only asked for when there are extras: build requirements
    are not installed here)."""
    if not wanted.extras:
        return []
    found = []
    for line in metadata.requires(wanted.name) or []:
        requirement = Requirement(line)
        marker = requirement.marker
        if not marker or "extra" not in str(marker):
            continue
        if any(marker.evaluate({"extra": extra}) for extra in wanted.extras):
            found += [requirement, *_extra_requirements(requirement)]
    return found


def test_the_celery_lock_pins_the_daemon_as_requirements_lock_does() -> None:
    """compose.celery.yaml's image runs the same daemon as the Dockerfile's."""
    daemon, celery = _pins(ROOT / "requirements.lock"), _pins(ROOT / "requirements-celery.lock")
    differ = {name: (version, celery.get(name)) for name, version in daemon.items()}
    assert {name: pair for name, pair in differ.items() if pair[0] != pair[1]} == {}


def _pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` requirement; each must carry hashes."""
    text = path.read_text().replace("\\\n", " ")
    pins: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = re.match(r"([A-Za-z0-9_.\-]+)==(\S+)", line)
        assert match, f"{path.name}: not an exact pin: {line.strip()[:80]}"
        assert "--hash=sha256:" in line, f"{path.name}: {match.group(1)} has no hash"
        pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def test_the_image_runs_scheduler_run_as_a_non_root_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _image_uid() != 0
    entrypoint = RUNTIME.last("ENTRYPOINT").exec_form()
    command = RUNTIME.last("CMD").exec_form()
    assert entrypoint == ["scheduler"]
    assert command == ["run"]
    assert _checked(command, {}, monkeypatch) == "run"
    assert accepted_envvars(resolve(command)[1]) >= {
        name for name in IMAGE_ENV if name.startswith("SCHEDULER_")
    }, "the image sets a SCHEDULER_* variable that `scheduler run` does not read"


def test_the_healthcheck_fetches_healthz_on_the_http_port() -> None:
    """The check's logic is the tested module `scheduler.healthcheck`
    (tests/acceptance/test_healthcheck.py), which follows the port the daemon really
    listens on; its own timeout is within the HEALTHCHECK's."""
    options, command = dockerfile.healthcheck(RUNTIME)
    assert command == ["python", "-m", "scheduler.healthcheck"]
    assert importlib.util.find_spec("scheduler.healthcheck") is not None
    port = IMAGE_ENV["SCHEDULER_HTTP"].rpartition(":")[2]
    assert RUNTIME.last("EXPOSE").text.split() == [port]
    assert parse_duration(options["timeout"]).total_seconds() > healthcheck.TIMEOUT_S
    assert parse_duration(options["timeout"]) < parse_duration(options["interval"])


def test_the_sqlite_default_lives_on_a_volume() -> None:
    """The image's default database is SQLite under /var/lib/scheduler: that folder is a
    volume, so a container's runs are not lost with it (and replicas are told to share
    PostgreSQL instead)."""
    url = IMAGE_ENV["SCHEDULER_DATABASE_URL"]
    assert url.startswith("sqlite:////var/lib/scheduler/")
    volumes = [json.loads(item.text) for item in RUNTIME.all("VOLUME")]
    assert volumes == [["/var/lib/scheduler"]]
    assert str(Path(url.removeprefix("sqlite:///")).parent) == volumes[0][0]


def test_no_secret_is_baked_into_the_image() -> None:
    for stage in STAGES:
        for name, value in stage.env().items():
            assert not re.search(r"PASSWORD|SECRET|TOKEN|KEY", name), name
            if "://" in value:
                assert urlsplit(value).password is None, f"{name} carries a password"
        assert not stage.all("ARG") or all(
            not re.search(r"PASSWORD|SECRET|TOKEN", item.text) for item in stage.all("ARG")
        )
    ignored = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignored[0] == "*", ".dockerignore starts from nothing and allows what the build needs"
    assert "**/.env" in ignored


EXAMPLES = "/opt/scheduler-examples/jobs"


def test_the_image_runs_no_jobs_until_told_which() -> None:
    """The examples are baked in off the import path; SCHEDULER_JOBS is not set, so the
    image refuses to run (exit 2) until it names the user's modules or the examples."""
    copies = [dockerfile.copy_arguments(item)[1:] for item in RUNTIME.all("COPY")]
    assert (["jobs/"], f"{EXAMPLES}/") in copies
    workdir = RUNTIME.last("WORKDIR").text
    assert IMAGE_ENV["PYTHONPATH"] == workdir
    assert not EXAMPLES.startswith(f"{workdir}/")
    assert "SCHEDULER_JOBS" not in IMAGE_ENV
    assert not [target for _, target in copies if target.startswith(f"{workdir}/")]


def test_only_the_compose_demo_runs_the_examples() -> None:
    scheduler = _compose()["services"]["scheduler"]
    assert scheduler["environment"]["SCHEDULER_JOBS"] == EXAMPLES, "the demo, on purpose"
    for where, pod in _pod_specs():
        for container in pod["containers"]:
            jobs = _env(container).get("SCHEDULER_JOBS")
            if container["args"][0] == "migrate":
                assert jobs is None, where
                continue
            assert jobs not in (None, "jobs", EXAMPLES), f"{where} must name the user's modules"


# -- compose.yaml ----------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert isinstance(loaded, dict)
    interpolated: dict[str, Any] = _interpolate(loaded)
    return interpolated


def _interpolate(value: Any) -> Any:
    """Compose's `${NAME:-default}`, taking the default (the file must work unconfigured)."""
    if isinstance(value, str):
        return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", value)
    if isinstance(value, dict):
        return {key: _interpolate(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_interpolate(item) for item in value]
    return value


def _scheduler_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose["services"].items() if s.get("image") == IMAGE}


def test_compose_has_postgres_17_with_a_health_check_and_a_named_volume() -> None:
    compose = _compose()
    postgres = compose["services"]["postgres"]
    assert postgres["image"] == "postgres:17"
    check = postgres["healthcheck"]["test"]
    assert check[0] in ("CMD", "CMD-SHELL")
    assert "pg_isready" in " ".join(check)
    volume, _, target = postgres["volumes"][0].partition(":")
    assert volume in compose["volumes"], "a named volume, declared at the top level"
    assert target == "/var/lib/postgresql/data"


def test_compose_migrates_once_then_starts_two_replicas() -> None:
    services = _scheduler_services(_compose())
    assert set(services) == {"migrate", "scheduler"}
    migrate, scheduler = services["migrate"], services["scheduler"]
    assert migrate["command"] == ["migrate"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert scheduler["command"][0] == "run"
    assert scheduler["deploy"]["replicas"] == 2
    assert scheduler["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "migrate": {"condition": "service_completed_successfully"},
    }
    for service in services.values():
        assert service["build"] == "."
        assert service["environment"]["SCHEDULER_LOG_FORMAT"] == "json"


def test_compose_commands_and_variables_are_ones_the_cli_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compose = _compose()
    postgres = compose["services"]["postgres"]["environment"]
    for service in _scheduler_services(compose).values():
        _checked(service["command"], service["environment"], monkeypatch)
        url = urlsplit(service["environment"]["SCHEDULER_DATABASE_URL"])
        assert (url.hostname, url.username, url.path) == (
            "postgres",
            postgres["POSTGRES_USER"],
            f"/{postgres['POSTGRES_DB']}",
        )
        assert unquote(url.password or "") == postgres["POSTGRES_PASSWORD"]


def test_compose_lets_a_replica_drain_before_it_is_killed() -> None:
    scheduler = _compose()["services"]["scheduler"]
    grace = parse_duration(scheduler["environment"].get("SCHEDULER_GRACE", "30s"))
    assert parse_duration(scheduler["stop_grace_period"]) > grace


# -- compose.celery.yaml ---------------------------------------------------------------


def _celery_compose() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "compose.celery.yaml").read_text())
    assert isinstance(loaded, dict)
    interpolated: dict[str, Any] = _interpolate(loaded)
    return interpolated


def celery_image() -> list[dockerfile.Stage]:
    """The stages of the image compose.celery.yaml builds (one for every service of it)."""
    builds = [s["build"] for s in _celery_compose()["services"].values() if "build" in s]
    assert builds, "compose.celery.yaml builds no image"
    assert all(build == builds[0] for build in builds), "its services share one image"
    source = builds[0]["dockerfile_inline"]
    assert "${" not in source, "Compose would fill it in from the host's environment"
    return dockerfile.parse_text(source)


def test_the_celery_image_installs_the_hashed_celery_lock_then_the_project_alone() -> None:
    stages = celery_image()
    assert {stage.base for stage in stages} == {"python:3.13-slim"}
    commands = " ".join(
        dockerfile.run_command(item) for stage in stages[:-1] for item in stage.all("RUN")
    )
    for lock in ("requirements-celery.lock", "requirements-build.lock"):
        assert re.search(rf"--require-hashes [^&]*-r {re.escape(lock)}", commands), lock
    assert re.search(r"pip install --no-deps [^&]*cronclaim-\*\.whl", commands)
    assert "pip check" in commands
    runtime = stages[-1]
    assert not any("pip install" in dockerfile.run_command(i) for i in runtime.all("RUN"))
    assert runtime.last("USER").text.split(":")[0] == "10001"


def test_everything_the_images_copy_is_in_the_build_context() -> None:
    """.dockerignore starts from nothing: each file a COPY names must be let in."""
    rules = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for stages in (STAGES, celery_image()):
        for stage in stages:
            for item in stage.all("COPY"):
                flags, sources, _ = dockerfile.copy_arguments(item)
                if "from" in flags:
                    continue
                for source in sources:
                    path = ROOT / source
                    assert path.exists(), source
                    files = sorted(path.rglob("*.py"))[:5] if path.is_dir() else [path]
                    for file in files:
                        relative = file.relative_to(ROOT).as_posix()
                        assert _let_in(relative, rules), f"COPY {source}: {relative} is ignored"


def _let_in(path: str, rules: list[str]) -> bool:
    """Docker's rule: the last pattern that matches the path or a folder above it wins."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    included = True
    for rule in rules:
        negated = rule.startswith("!")
        pattern = re.compile(_glob(rule.removeprefix("!")))
        if any(pattern.fullmatch(candidate) for candidate in candidates):
            included = negated
    return included


def _glob(pattern: str) -> str:
    """A .dockerignore pattern as a regular expression (`**` spans folders, `*` does not)."""
    out = ""
    for piece in re.split(r"(\*\*/?|\*|\?|\[[^]]*\])", pattern):
        if piece.startswith("**"):
            out += "(?:.*/)?" if piece.endswith("/") else ".*"
        elif piece == "*":
            out += "[^/]*"
        elif piece == "?":
            out += "[^/]"
        elif piece.startswith("["):
            out += piece
        else:
            out += re.escape(piece)
    return out


def test_the_celery_demo_commands_are_ones_the_cli_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = _celery_compose()["services"]
    for name in ("migrate", "scheduler"):
        command = services[name]["command"]
        assert command[0] == "scheduler"
        _checked(command[1:], services[name]["environment"], monkeypatch)
    worker = services["worker"]["command"]
    assert worker[:4] == ["celery", "-A", "celery_demo", "worker"]
    queue = worker[worker.index("-Q") + 1]
    assert 'queue="' + queue + '"' in (ROOT / "deploy" / "celery" / "celery_demo.py").read_text()


# -- Kubernetes ------------------------------------------------------------------------


def _manifests() -> list[dict[str, Any]]:
    documents = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        documents += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return documents


def _one(kind: str) -> dict[str, Any]:
    found = [doc for doc in _manifests() if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in _manifests():
        spec = doc.get("spec", {})
        if doc["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        if "template" in spec:
            yield f"{doc['kind']}/{doc['metadata']['name']}", spec["template"]["spec"]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value", PLACEHOLDER) for item in container.get("env", [])}


def test_kubernetes_has_a_migration_job_a_deployment_and_a_cronjob() -> None:
    kinds = sorted(doc["kind"] for doc in _manifests())
    assert {"Job", "Deployment", "CronJob"} <= set(kinds)
    for doc in _manifests():
        assert doc["apiVersion"] in ("v1", "apps/v1", "batch/v1", "policy/v1"), doc["kind"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "scheduler"


def test_kubernetes_commands_and_variables_are_ones_the_cli_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commands = {}
    for where, pod in _pod_specs():
        for container in pod["containers"]:
            assert container["image"] == IMAGE, where
            assert "command" not in container, f"{where}: keep the image's ENTRYPOINT"
            commands[where] = _checked(container["args"], _env(container), monkeypatch)
    assert sorted(commands.values()) == ["migrate", "run", "run-once"]


def test_kubernetes_pods_run_as_the_images_user_and_take_the_url_from_a_secret() -> None:
    secrets = set()
    for where, pod in _pod_specs():
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True, where
        assert context["runAsUser"] == _image_uid(), where
        assert pod["automountServiceAccountToken"] is False, where
        for container in pod["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            url = next(e for e in container["env"] if e["name"] == "SCHEDULER_DATABASE_URL")
            assert "value" not in url, f"{where}: the database URL belongs in a Secret"
            reference = url["valueFrom"]["secretKeyRef"]
            secrets.add((reference["name"], reference["key"]))
    assert len(secrets) == 1, "every pod must talk to the same database"


def test_the_deployment_runs_replicas_with_probes_on_healthz_and_readyz() -> None:
    deployment = _one("Deployment")
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    port = int(args[args.index("--http") + 1].rpartition(":")[2])
    ports = {item["name"]: item["containerPort"] for item in container["ports"]}
    probes = {
        kind: (container[kind]["httpGet"]["path"], ports[container[kind]["httpGet"]["port"]])
        for kind in ("livenessProbe", "readinessProbe", "startupProbe")
    }
    assert probes == {
        "livenessProbe": ("/healthz", port),
        "readinessProbe": ("/readyz", port),
        "startupProbe": ("/healthz", port),
    }
    grace = parse_duration(_env(container).get("SCHEDULER_GRACE", "30s"))
    assert timedelta(seconds=pod["terminationGracePeriodSeconds"]) > grace
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_the_migration_job_runs_migrate_to_completion() -> None:
    job = _one("Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["migrate"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] >= 1


def test_the_cronjob_runs_once_with_forbid_and_a_deadline_inside_its_period() -> None:
    cronjob = _one("CronJob")
    spec = cronjob["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    (container,) = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "run-once"
    assert len(container["args"]) == 2, "run-once JOB: the latest due period"
    deployment = _one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert _env(container)["SCHEDULER_JOBS"] == _env(deployment)["SCHEDULER_JOBS"]
    zone = spec.get("timeZone", "UTC")
    assert _same_zone(zone, "UTC"), "the job's zone is UTC unless it says otherwise"
    schedule = parse_schedule(spec["schedule"], zone)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    periods = list(schedule.periods_between(start, start + timedelta(days=8)))
    shortest = min(b - a for a, b in itertools.pairwise(periods))
    assert timedelta(seconds=spec["startingDeadlineSeconds"]) < shortest, (
        "a late pod must not run into the next period"
    )
    assert spec["jobTemplate"]["spec"]["backoffLimit"] == 0, "retries are the job's policy"


def _same_zone(first: str, second: str) -> bool:
    instants = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=d) for d in range(0, 366, 7)]
    return all(
        moment.astimezone(ZoneInfo(first)).utcoffset()
        == moment.astimezone(ZoneInfo(second)).utcoffset()
        for moment in instants
    )
