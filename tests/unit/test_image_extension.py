"""The "build on the image" snippet of docs/how-to/deploying.md agrees with the Dockerfile
it builds on: the tag, the user it switches back to, the paths it installs into and
copies to, and the variables it relies on. Both files are read; neither is copied here."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from tests import dockerfile
from tests.cli_model import accepted_envvars, resolve

ROOT = Path(__file__).parents[2]
DEPLOYING = ROOT / "docs" / "how-to" / "deploying.md"
RUNTIME = dockerfile.parse()[-1]
IMAGE_ENV = RUNTIME.env()


def _snippet() -> dockerfile.Stage:
    """The one ```dockerfile block of deploying.md that builds FROM the image."""
    blocks = re.findall(r"^ *```dockerfile\n(.*?)^ *```", DEPLOYING.read_text(), re.M | re.S)
    stages = [stage for block in blocks for stage in dockerfile.parse_text(block)]
    extending = [stage for stage in stages if stage.base.startswith("scheduler:")]
    assert len(extending) == 1, f"{DEPLOYING.name} needs one dockerfile block FROM scheduler:…"
    return extending[0]


def _users(stage: dockerfile.Stage) -> list[str]:
    return [item.text for item in stage.all("USER")]


def _version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def test_it_builds_on_this_versions_image() -> None:
    labels = {
        key: value
        for item in RUNTIME.all("LABEL")
        for key, _, value in (token.partition("=") for token in shlex.split(item.text))
    }
    assert labels["org.opencontainers.image.version"] == _version()
    title = labels["org.opencontainers.image.title"]
    assert _snippet().base == f"{title}:{_version()}"


def test_it_ends_as_the_images_own_user_which_the_dockerfile_creates() -> None:
    image_user = RUNTIME.last("USER").text
    uid, _, gid = image_user.partition(":")
    created = " ".join(dockerfile.run_command(item) for item in RUNTIME.all("RUN"))
    assert re.search(rf"groupadd\b[^&]*--gid {gid}\b", created), f"no group with gid {gid}"
    assert re.search(rf"useradd\b[^&]*--uid {uid}\b", created), f"no user with uid {uid}"
    users = _users(_snippet())
    assert users[0] == "root", "the snippet installs as root"
    assert users[-1] == image_user, f"the snippet must switch back to USER {image_user}"
    # The Dockerfile's own comment gives the same advice with the same user.
    assert f"`USER {image_user}`" in " ".join(dockerfile.DOCKERFILE.read_text().split())


def test_it_installs_as_root_into_the_images_root_owned_environment() -> None:
    snippet = _snippet()
    installs = [
        item for item in snippet.instructions if item.keyword == "RUN" and "pip" in item.text
    ]
    assert installs, "the snippet installs nothing"
    position = snippet.instructions.index
    root = next(item for item in snippet.all("USER") if item.text == "root")
    back = snippet.all("USER")[-1]
    for item in installs:
        assert position(root) < position(item) < position(back), f"{item.text} not run as root"
        pip = shlex.split(dockerfile.run_command(item))[0]
        venv = str(Path(pip).parent.parent)
        copied = [dockerfile.copy_arguments(copy) for copy in RUNTIME.all("COPY")]
        owned_by_root = [
            flags for flags, _, destination in copied if destination.rstrip("/") == venv
        ]
        assert owned_by_root, f"the image has no {venv} for {pip}"
        assert all("chown" not in flags for flags in owned_by_root), (
            f"{venv} is not root's in the image: the snippet's USER root would be needless"
        )
        assert f"{venv}/bin" in IMAGE_ENV["PATH"].split(":"), f"{venv}/bin is not on PATH"


def test_its_code_lands_on_the_images_import_path_and_names_a_variable_run_reads() -> None:
    snippet = _snippet()
    workdir = RUNTIME.last("WORKDIR").text
    assert IMAGE_ENV["PYTHONPATH"] == workdir
    destinations = [dockerfile.copy_arguments(item)[2] for item in snippet.all("COPY")]
    code = [path for path in destinations if path.startswith(f"{workdir}/")]
    assert code, f"the snippet copies no code under {workdir}"
    env = snippet.env()
    _, run, _ = resolve(["run"])
    assert set(env) <= accepted_envvars(run), f"`scheduler run` reads none of {set(env)}"
    modules = env["SCHEDULER_JOBS"].split(",")
    packages = {Path(path.rstrip("/")).relative_to(workdir).parts[0] for path in code}
    assert {module.split(".")[0] for module in modules} <= packages, (
        f"SCHEDULER_JOBS={env['SCHEDULER_JOBS']} names a module the snippet does not copy"
    )
