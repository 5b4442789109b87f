"""The testing guide (docs/how-to/testing.md) run as a reader lays it out: its Python
blocks taken from the page as they are written, the files it names (`myapp/jobs.py`,
`tests/conftest.py`) written there, each example test in a file of its own next to that
conftest, and the whole run by pytest in a process of its own through the plugin's entry
point. The guide cannot drift from the API, nor its conftest-plus-mark setup break."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
# It starts a pytest process (3 to 6 s on two cores).
pytestmark = pytest.mark.slow

GUIDE = Path(__file__).parents[2] / "docs" / "how-to" / "testing.md"
# The application's own code, which the guide's job bodies call but leave to the reader.
APPLICATION = """
CALLS = []


def close_the_books(period):
    CALLS.append(("close_the_books", period))


def process(unit):
    CALLS.append(("process", unit))
"""
USES_APPLICATION = "from myapp.application import close_the_books, process  # noqa\n"


def guide_blocks() -> list[str]:
    """The guide's Python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_the_guides_examples_pass_as_written_with_its_conftest(pytester: pytest.Pytester) -> None:
    files: dict[str, str] = {}
    tests = 0
    for number, block in enumerate(guide_blocks()):
        header = re.match(r"# ([\w/]+\.py)\n", block)
        if header is not None:  # a file the guide names: written where it says
            files[header.group(1)] = USES_APPLICATION + block
        elif "\ndef test_" in block:
            files[f"tests/test_guide_{number}.py"] = USES_APPLICATION + block
            tests += block.count("\ndef test_")
        else:  # a snippet to run as it stands (the Harness without pytest)
            body = textwrap.indent(block, "    ")
            files[f"tests/test_guide_{number}.py"] = f"def test_snippet():\n{body}"
            tests += 1
    assert {"myapp/jobs.py", "tests/conftest.py"} <= files.keys(), sorted(files)
    assert tests >= 5, files
    files["myapp/__init__.py"] = ""
    files["myapp/application.py"] = APPLICATION
    for name, text in files.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    # pytest's process runs in the project's root, which is on its path (`myapp`).
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "tests")
    result.assert_outcomes(passed=tests)
