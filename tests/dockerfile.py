"""A reader for the project's Dockerfile: its stages and instructions, so tests can check
what the image does and replay its install steps without Docker."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).parents[1]
DOCKERFILE = ROOT / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    text: str

    def exec_form(self) -> list[str]:
        """`CMD ["run"]` -> ["run"]; the shell form is refused, it would need /bin/sh."""
        parsed = json.loads(self.text)
        assert isinstance(parsed, list), f"{self.keyword} {self.text} is not the exec form"
        return [str(item) for item in parsed]


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [item for item in self.instructions if item.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"stage {self.name or self.base} has no {keyword}"
        return found[-1]

    def env(self) -> dict[str, str]:
        """ENV KEY=value pairs in order, values unexpanded (`${PATH}` stays as written)."""
        values: dict[str, str] = {}
        for item in self.all("ENV"):
            values.update(env_pairs(item))
        return values


def env_pairs(instruction: Instruction) -> list[tuple[str, str]]:
    """ENV A=1 B="x y" -> [("A", "1"), ("B", "x y")]."""
    pairs = []
    for token in shlex.split(instruction.text, posix=True):
        key, sep, value = token.partition("=")
        assert sep, f"ENV {instruction.text}: use the KEY=value form"
        pairs.append((key, value))
    return pairs


def parse(path: Path = DOCKERFILE) -> list[Stage]:
    return parse_text(path.read_text())


def parse_text(source: str) -> list[Stage]:
    """The stages of a Dockerfile's text (compose.celery.yaml's is inline)."""
    stages: list[Stage] = []
    for keyword, text in _instructions(source):
        if keyword == "FROM":
            match = re.fullmatch(r"(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", text, re.IGNORECASE)
            assert match, f"FROM {text}: cannot read"
            stages.append(Stage(base=match.group(1), name=match.group(2)))
        else:
            assert stages or keyword == "ARG", f"{keyword} before FROM"
            if stages:
                stages[-1].instructions.append(Instruction(keyword, text))
    return stages


def _instructions(source: str) -> list[tuple[str, str]]:
    """Join continuation lines, drop comments, split each instruction into keyword and text."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in source.splitlines():
        if line.lstrip().startswith("#"):
            continue  # comments, also between continued lines
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            keyword, _, text = whole.partition(" ")
            found.append((keyword.upper(), text.strip()))
    return found


def run_command(instruction: Instruction) -> str:
    """A RUN's shell command without its BuildKit flags (`--mount=…`)."""
    return re.sub(r"^(?:--\S+\s+)+", "", instruction.text.strip())


def healthcheck(stage: Stage) -> tuple[dict[str, str], list[str]]:
    """HEALTHCHECK --interval=… CMD [...] -> ({"interval": …}, [...])."""
    options, _, command = stage.last("HEALTHCHECK").text.partition(" CMD ")
    flags = dict(flag.removeprefix("--").split("=", 1) for flag in options.split())
    return flags, Instruction("CMD", command).exec_form()


def copy_arguments(instruction: Instruction) -> tuple[dict[str, str], list[str], str]:
    """COPY --from=build a b dest/ -> ({"from": "build"}, ["a", "b"], "dest/")."""
    words = shlex.split(instruction.text)
    flags = dict(word.removeprefix("--").split("=", 1) for word in words if word.startswith("--"))
    paths = [word for word in words if not word.startswith("--")]
    return flags, paths[:-1], paths[-1]
