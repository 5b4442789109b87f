"""`--http HOST:PORT` as data, apart from the server: the container's health check reads
it too, and should not load the server's libraries (Prometheus, the console) to do so."""

from __future__ import annotations

import re
from dataclasses import dataclass

from scheduler.errors import UserError

_ADDRESS = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d{1,5})$")


@dataclass(frozen=True)
class HttpAddress:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_address(raw: str, option: str = "--http") -> HttpAddress:
    """`HOST:PORT`, `[IPv6]:PORT` or `:PORT` (every interface); port 0 picks a free one."""
    match = _ADDRESS.match(raw.strip())
    port = int(match["port"]) if match else -1
    if not match or port > 65535:
        raise UserError(f"{option}: expected HOST:PORT such as 127.0.0.1:9464, got {raw!r}")
    return HttpAddress(match["v6"] or match["host"] or "0.0.0.0", port)  # noqa: S104 - asked for
