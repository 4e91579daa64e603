#!/usr/bin/env python3
"""Turns one `compare --quick --json` run into BENCHMARKS.md's table: each contender's ns per
cycle and the ratios the targets are stated in, all from the same run.

    target/release/examples/compare --quick --json > run.json && benches/table.py run.json
"""
import json
import sys


def main() -> int:
    with open(sys.argv[1]) as f:
        rows = json.load(f)["results"]
    ns = {(r["impl"], r["tenants"], r["threads"]): r["ns_per_cycle"] for r in rows}
    cases = sorted({(r["threads"], r["tenants"]) for r in rows})
    impls = ["fairq", "fairq_lean", "floor", "mutex_swrr", "firq_core"]
    print("| threads | T | " + " | ".join(f"{i} ns" for i in impls)
          + " | fairq/floor | mutex/fairq | firq/fairq |")
    print("|---" * (len(impls) + 5) + "|")
    for threads, tenants in cases:
        get = lambda i: ns.get((i, tenants, threads))
        cells = [f"{get(i):.1f}" if get(i) is not None else "-" for i in impls]
        fairq = get("fairq")

        def ratio(a, b):
            return f"{a / b:.2f}" if a is not None and b else "-"

        print(f"| {threads} | {tenants} | " + " | ".join(cells)
              + f" | {ratio(fairq, get('floor'))} | {ratio(get('mutex_swrr'), fairq)}"
              + f" | {ratio(get('firq_core'), fairq)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
