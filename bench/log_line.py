"""What one of our log lines costs: one thread logs `run_started` and `run_succeeded`,
bound as a run's logger is, in JSON to /dev/null, and prints the time per line. No
contention and a warm cache: in a burst on a busy machine a line costs two to three
times this (BENCHMARKS, issue 19, seventeenth part).

    .venv/bin/python -m bench.log_line [--lines 100000]
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime

from scheduler import logs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    count = parser.parse_args().lines
    with open(os.devnull, "w") as out:  # noqa: PTH123 - a text stream, as stdout is
        logs.configure(logs.LogFormat.JSON, "info", stream=out)
        log = logs.get_logger(node="n0-5f3a9c").bind(
            job="job_00042",
            period=datetime.now(UTC).isoformat(),
            run_id="0123456789abcdef0123456789abcdef",
            attempt=1,
        )
        for event in ("run_started", "run_succeeded"):
            began = time.perf_counter()
            for _ in range(count):
                log.info(event, origin="schedule")
            per_line = (time.perf_counter() - began) / count * 1e6
            print(f"{event:<16} {per_line:5.2f} µs a line")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
