"""What a crawl costs before and after its one request: the command line's start-up CPU.

Each process of a shared crawl (``--frontier``) pays its interpreter's start and imports
while the processes started before it crawl, on the same CPUs, and a broad crawl's first
requests are CPU-bound: the start-up is in the crawl's wall time twice, once in each
process's own start and once in the CPU it takes from the others. This measures it with
the least crawl there is, one URL on a loopback port where nothing listens (the request
is refused at once, the record is written, the report printed), so that what is left is
the interpreter, the imports, the option checks, the crawler's set-up and the exit.

Two packages can be compared side by side (``--vs DIR``, a PYTHONPATH entry holding
another ``trio_crawler``, such as a compiled copy of an older commit): the two commands
alternate, round after round, so that the machine's drift falls on both alike, and each
round gives a ratio of the pair.

Usage::

    python benchmarks/bench_startup.py [--rounds 30] [--snapshot DIR] [--vs DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script: make the `benchmarks` folder importable as a package.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import (
    compiled,
    markdown_table,
    package_identity,
    run_main,
    run_measured,
    snapshot_package,
)
from benchmarks.nginx import free_port


def start_up_cpu(python: str, path: Path, url: str, work: Path) -> float:
    """CPU milliseconds of one one-URL crawl by the package at ``path``."""
    cost = run_measured(
        [python, "-m", "trio_crawler", "--no-progress", "-o", "-", url],
        timeout=60,
        cwd=work,  # not the checkout: python -m puts the working directory first
        env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"},
    )
    if cost.returncode != 0:
        raise RuntimeError(f"the crawl by {path} exited {cost.returncode}")
    return cost.cpu_s * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--snapshot", type=Path, help="PYTHONPATH entry holding trio_crawler")
    parser.add_argument("--vs", type=Path, help="another PYTHONPATH entry, to compare")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        work = Path(tmp)
        ours = compiled(args.snapshot) if args.snapshot else snapshot_package(work / "ours")
        packages = {"this package": ours}
        if args.vs is not None:
            packages["--vs"] = compiled(args.vs)
        url = f"http://127.0.0.1:{free_port()}/"  # nothing listens there
        cpu: dict[str, list[float]] = {name: [] for name in packages}
        for _ in range(args.rounds):
            for name, path in packages.items():
                cpu[name].append(start_up_cpu(args.python, path, url, work))
        rows = [
            [
                name,
                package_identity(path),
                f"{statistics.median(cpu[name]):.1f}",
                f"{min(cpu[name]):.1f}",
            ]
            for name, path in packages.items()
        ]
        print(markdown_table(["package", "code", "CPU ms, median", "CPU ms, least"], rows))
        if args.vs is not None:
            ratios = [a / b for a, b in zip(cpu["this package"], cpu["--vs"], strict=True)]
            print(
                f"\nthis package ÷ --vs, round by round: median {statistics.median(ratios):.3f}"
                f" (smallest {min(ratios):.3f}, largest {max(ratios):.3f}), {args.rounds} rounds"
            )


if __name__ == "__main__":
    run_main(main, "bench_startup")
