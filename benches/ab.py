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


def collect(args, command, pattern, case_of, values_of):
    """Runs every binary `args.rounds` times in turn with `command` after its name; returns the
    cases in first-seen order and, per binary and case, one list per value `values_of` gives."""
    figures = {b: {} for b in args.binaries}
    cases = []
    for _ in range(args.rounds):
        for binary in args.binaries:
            run = subprocess.run(
                args.prefix + [binary] + command, capture_output=True, text=True, check=True
            )
            for m in pattern.finditer(run.stdout):
                case = case_of(m)
                if case not in cases:
                    cases.append(case)
                values = values_of(m)
                lists = figures[binary].setdefault(case, [[] for _ in values])
                for kept, value in zip(lists, values):
                    kept.append(value)
    return cases, figures


def report(args, title, width, cases, figures, cell):
    """Prints one row per case and one column per binary; `cell` formats a case's lists."""
    names = [b.rsplit("/", 1)[-1] for b in args.binaries]
    print(title)
    print(f"{'case':34}" + "".join(f"{n:>{width}}" for n in names))
    for case in cases:
        cells = [cell(figures[b][case]) if case in figures[b] else "-" for b in args.binaries]
        print(f"{case:34}" + "".join(f"{c:>{width}}" for c in cells))


def ns_cell(lists):
    (ns,) = lists
    return f"{min(ns):.1f} / {statistics.median(ns):.1f}"


def hot_cell(lists):
    one, two = (statistics.median(rates) for rates in lists)
    return f"{one:.2f} / {two:.2f} / {two / one:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binaries", nargs="+", help="compare binaries to alternate")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--chrt", action="store_true", help="run under chrt -f 50")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    extra = argv[split + 1 :]
    args.prefix = ["chrt", "-f", "50"] if args.chrt else []
    if "--hot" in extra:
        cases, figures = collect(
            args,
            ["--quick"] + extra,
            HOT_ROW,
            lambda m: f"{m[1]} {m[2]}",
            lambda m: (float(m[3]), float(m[4])),
        )
        title = f"{args.rounds} rounds, median Mcycles/s: 1 thread / 2 threads / ratio of the medians"
        report(args, title, 26, cases, figures, hot_cell)
    else:
        cases, figures = collect(
            args,
            ["--quick", "--json"] + extra,
            ROW,
            lambda m: f"{m[1]} T={m[2]} threads={m[3]}",
            lambda m: (float(m[4]),),
        )
        title = f"{args.rounds} rounds, ns per cycle: fastest / median"
        report(args, title, 24, cases, figures, ns_cell)
    return 0


if __name__ == "__main__":
    sys.exit(main())
