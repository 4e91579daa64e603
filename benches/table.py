#!/usr/bin/env python3
"""Turns `compare --quick --json` runs into BENCHMARKS.md's tables: each contender's ns per cycle
and the ratios the targets are stated in.

    target/release/examples/compare --quick --json > run.json && benches/table.py run.json
    benches/table.py run1.json ... run7.json     # several runs of the same build, in a row

The table's figures and ratios all come from one run: the only run given, or the last of several
(BENCHMARKS.md records the last of seven in a row, so no run of a batch is picked). With
several, a second table gives each figure's and each ratio's lowest and highest over all of
them; a ratio is only ever taken within one run, whose contenders shared the machine's state.
(A median over the runs would mix runs from the host's slow and fast stretches cell by cell.)
"""
import json
import sys

IMPLS = ["fairq", "fairq_lean", "floor", "mutex_swrr", "firq_core"]
RATIOS = [("fairq/floor", "fairq", "floor"), ("mutex/fairq", "mutex_swrr", "fairq"),
          ("firq/fairq", "firq_core", "fairq")]


def load(path):
    with open(path) as f:
        rows = json.load(f)["results"]
    return {(r["impl"], r["tenants"], r["threads"]): r["ns_per_cycle"] for r in rows}


def cells(runs, threads, tenants):
    """Per column, the values over the runs (missing ones left out)."""
    out = []
    for impl in IMPLS:
        out.append([ns[(impl, tenants, threads)] for ns in runs
                    if (impl, tenants, threads) in ns])
    for _, a, b in RATIOS:
        out.append([ns[(a, tenants, threads)] / ns[(b, tenants, threads)] for ns in runs
                    if (a, tenants, threads) in ns and ns.get((b, tenants, threads))])
    return out


def table(runs, cases, show):
    print("| threads | T | " + " | ".join(f"{i} ns" for i in IMPLS) + " | "
          + " | ".join(name for name, _, _ in RATIOS) + " |")
    print("|---" * (len(IMPLS) + len(RATIOS) + 2) + "|")
    for threads, tenants in cases:
        values = cells(runs, threads, tenants)
        shown = []
        for column, vals in enumerate(values):
            digits = 1 if column < len(IMPLS) else 2
            shown.append(show(vals, digits) if vals else "-")
        print(f"| {threads} | {tenants} | " + " | ".join(shown) + " |")


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs = [load(path) for path in sys.argv[1:]]
    cases = sorted({(threads, tenants) for ns in runs for (_, tenants, threads) in ns})
    table(runs[-1:], cases, lambda vals, d: f"{vals[0]:.{d}f}")
    if len(runs) == 1:
        return 0
    print()
    print(f"Lowest-highest over the {len(runs)} runs:")
    print()
    table(runs, cases, lambda vals, d: f"{min(vals):.{d}f}-{max(vals):.{d}f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
