"""`python -m scheduler.healthcheck`: the container image's HEALTHCHECK, one line out.

It asks the daemon's own /healthz at the address the daemon really listens on: the
`--http` on the daemon's command line (process 1 in a container; flags win over
variables, as for the daemon), else `SCHEDULER_HTTP`. A wildcard host (`0.0.0.0`,
`:PORT`, `[::]`) is asked on loopback; any other host as written.

- No endpoint (`SCHEDULER_HTTP` unset or empty: the operator turned it off): healthy,
  and it says so. The only evidence that needs no HTTP is that the daemon's process
  lives, which Docker already knows (the container ends with it); `scheduler check`
  judges the whole fleet, not this container, and would query the database every
  interval.
- An address the daemon itself would refuse, or port 0 (a free port chosen at start,
  which nothing outside the daemon can know): unhealthy, with the one-line reason;
  never a guess at another port.

Exit 0 healthy, 1 unhealthy (Docker reserves 2). Standard library only: it runs every
30 s, and loads neither the server nor the database drivers.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from scheduler.errors import UserError
from scheduler.http_address import HttpAddress, parse_address

HEALTHY = 0
UNHEALTHY = 1
# Below the image's `HEALTHCHECK --timeout=5s`, so that a slow answer is said, not killed.
TIMEOUT_S = 4.0
# The host to ask when the daemon listens on every interface of a family.
LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 - read, not bound


def daemon_flag(argv: Sequence[str]) -> str | None:
    """The `--http` value on a daemon's command line (the last one wins), if any."""
    found: str | None = None
    for index, arg in enumerate(argv):
        if arg == "--http" and index + 1 < len(argv):
            found = argv[index + 1]
        elif arg.startswith("--http="):
            found = arg.removeprefix("--http=")
    return found


def command_line(pid: int) -> list[str]:
    """A process's arguments; none when it cannot be read (another user's, gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def endpoint(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[str, str | None]:
    """Where the daemon's address was read (for the messages) and its raw value."""
    flag = daemon_flag(argv)
    if flag is not None:
        return "the daemon's --http", flag
    return "SCHEDULER_HTTP", environ.get("SCHEDULER_HTTP")


def url_of(address: HttpAddress) -> str:
    host = LOOPBACK.get(address.host, address.host)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{address.port}/healthz"


def check(source: str, raw: str | None) -> tuple[int, str]:
    """The verdict and the line that says it."""
    if not raw:  # as the daemon reads it: unset or empty is off
        return HEALTHY, (
            f"healthy: no HTTP endpoint to ask ({source} is "
            f"{'unset' if raw is None else 'empty'}: /healthz is off); the container "
            "runs as long as the daemon does"
        )
    try:
        address = parse_address(raw, option=source)
    except UserError as error:
        return UNHEALTHY, f"error: {error}"
    if address.port == 0:
        return UNHEALTHY, (
            f"error: {source}: port 0 is a free port chosen at start, which this check "
            "cannot know; give a fixed port, e.g. 0.0.0.0:9464"
        )
    url = url_of(address)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 - http
            return HEALTHY, f"healthy: {url} answered {response.status}"
    except urllib.error.HTTPError as error:
        said = error.read().decode(errors="replace").strip().splitlines()
        return UNHEALTHY, f"unhealthy: {url} answered {error.code}: {said[0] if said else ''}"
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        return UNHEALTHY, f"unhealthy: nothing answers at {url} ({reason})"


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.healthcheck",
        description="Ask the daemon's /healthz at the address it listens on.",
    )
    parser.add_argument(
        "--pid",
        type=int,
        default=1,
        help="the daemon's process, whose --http flag wins over SCHEDULER_HTTP (default 1)",
    )
    options = parser.parse_args(args)
    source, raw = endpoint(command_line(options.pid), os.environ)
    code, line = check(source, raw)
    print(line, file=sys.stdout if code == HEALTHY else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
