#!/usr/bin/env python3
"""A/B of `compare` binaries on a noisy machine: runs them in turn, round after round, and
prints each case's fastest and median ns per cycle per binary.

On a shared host one binary's figures move by 10-20% between runs as the load on the host
changes, so two binaries timed one after the other compare the host, not the code. Alternating
them for many short rounds exposes both to the same load; the minimum (the least disturbed
round) is the steadiest figure, the median shows the spread.

    cargo build --release --example compare && cp target/release/examples/compare /tmp/compare.a
    # ... change the code, build again ...
    cp target/release/examples/compare /tmp/compare.b
    benches/ab.py /tmp/compare.a /tmp/compare.b --rounds 40 -- --threads 1 --tenants 1,64 \\
        --impls fairq_lean

Arguments after `--` go to every `compare --quick --json` run. Prefix the timed runs with
`chrt -f 50` (root) with `--chrt`. With `--hot` among them the runs are `compare --quick --hot`
(no JSON there): each case's median one-thread and two-thread Mcycles/s and their ratio.

    benches/ab.py /tmp/compare.a /tmp/compare.b --rounds 10 -- --hot --impls fairq,fairq_lean
"""
import argparse
import re
import statistics
import subprocess
import sys

ROW = re.compile(
    r'"impl": "(\w+)", "tenants": (\d+), "threads": (\d+), "ns_per_cycle": ([\d.]+)'
)
HOT_ROW = re.compile(r"^\s*(1 tenant|\d+ tenants [\d:]+)\s+(\w+)\s+([\d.]+)\s+([\d.]+)", re.M)


def hot(args, prefix, extra) -> int:
    """The `--hot` A/B: medians of the one- and two-thread rates, and their ratio."""
    figures = {b: {} for b in args.binaries}
    cases = []
    for _ in range(args.rounds):
        for binary in args.binaries:
            run = subprocess.run(
                prefix + [binary, "--quick"] + extra, capture_output=True, text=True, check=True
            )
            for m in HOT_ROW.finditer(run.stdout):
                case = f"{m[1]} {m[2]}"
                if case not in cases:
                    cases.append(case)
                rates = figures[binary].setdefault(case, ([], []))
                rates[0].append(float(m[3]))
                rates[1].append(float(m[4]))
    names = [b.rsplit("/", 1)[-1] for b in args.binaries]
    print(f"{args.rounds} rounds, median Mcycles/s: 1 thread / 2 threads / ratio of the medians")
    print(f"{'case':28}" + "".join(f"{n:>26}" for n in names))
    for case in cases:
        cells = []
        for binary in args.binaries:
            one, two = figures[binary].get(case, ([], []))
            if one:
                m1, m2 = statistics.median(one), statistics.median(two)
                cells.append(f"{m1:.2f} / {m2:.2f} / {m2 / m1:.2f}")
            else:
                cells.append("-")
        print(f"{case:28}" + "".join(f"{c:>26}" for c in cells))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binaries", nargs="+", help="compare binaries to alternate")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--chrt", action="store_true", help="run under chrt -f 50")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    extra = argv[split + 1 :]
    prefix = ["chrt", "-f", "50"] if args.chrt else []
    if "--hot" in extra:
        return hot(args, prefix, extra)
    figures = {b: {} for b in args.binaries}
    cases = []
    for _ in range(args.rounds):
        for binary in args.binaries:
            run = subprocess.run(
                prefix + [binary, "--quick", "--json"] + extra,
                capture_output=True,
                text=True,
                check=True,
            )
            for m in ROW.finditer(run.stdout):
                case = f"{m[1]} T={m[2]} threads={m[3]}"
                if case not in cases:
                    cases.append(case)
                figures[binary].setdefault(case, []).append(float(m[4]))
    names = [b.rsplit("/", 1)[-1] for b in args.binaries]
    print(f"{args.rounds} rounds, ns per cycle: fastest / median")
    print(f"{'case':34}" + "".join(f"{n:>24}" for n in names))
    for case in cases:
        cells = []
        for binary in args.binaries:
            got = figures[binary].get(case, [])
            cells.append(f"{min(got):.1f} / {statistics.median(got):.1f}" if got else "-")
        print(f"{case:34}" + "".join(f"{c:>24}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
