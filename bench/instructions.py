"""Instructions per embedded command, counted by valgrind's callgrind.

Wall and CPU time on this kind of machine move by ±5 points from run to run; the number
of instructions a run executes does not. For each kind, this runs the same setup twice
under `valgrind --tool=callgrind`, once with no timed commands and once with N, and
prints the difference divided by N: the instructions one command costs (the service's,
and for create the floor's, as `bench/embedded.py` defines them). About a minute a count.

    /work/venv/bin/python bench/instructions.py [--n 400] [--kinds create delete undo]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

WARMUP = 50
SIDES = ("service", "floor")


def run_commands(kind: str, side: str, setup: int, n: int) -> None:
    """The measured program: a side set up for `setup` commands, then `n` of them."""
    import embedded

    directory = Path(tempfile.mkdtemp(prefix="healthledger-instructions-"))
    try:
        if side == "floor":
            conn, run = embedded.floor_side(directory, WARMUP)
            close = conn.close
        else:
            prepared = embedded.service_side(kind, directory, setup, WARMUP)
            run, close = prepared.run, prepared.service.close
        try:
            for i in range(n):
                run(i)
        finally:
            close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def count(kind: str, side: str, setup: int, n: int) -> int:
    """Instructions of one run of `run_commands` under callgrind."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--measured",
            kind,
            side,
            str(setup),
            str(n),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind reported no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--measured"]:
        kind, side, setup, n = args[1], args[2], int(args[3]), int(args[4])
        run_commands(kind, side, setup, n)
        return 0
    parser = argparse.ArgumentParser(description="Instructions per embedded command.")
    parser.add_argument("--n", type=int, default=400, help="commands counted per kind")
    parser.add_argument(
        "--kinds", nargs="+", choices=("create", "delete", "undo"), default=["create"]
    )
    parsed = parser.parse_args(args)
    if parsed.n < 1:
        parser.error("--n must be at least 1")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed")
    print(f"{'command':<8} {'side':<8} {'instructions/command':>22}")
    for kind in parsed.kinds:
        for side in SIDES if kind == "create" else SIDES[:1]:
            # Both runs set up the same users (delete and undo need N of them).
            base = count(kind, side, parsed.n, 0)
            total = count(kind, side, parsed.n, parsed.n)
            print(f"{kind:<8} {side:<8} {(total - base) // parsed.n:>22,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
