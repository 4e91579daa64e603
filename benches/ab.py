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
`chrt -f 50` (root) with `--chrt`.
"""
import argparse
import re
import statistics
import subprocess
import sys

ROW = re.compile(
    r'"impl": "(\w+)", "tenants": (\d+), "threads": (\d+), "ns_per_cycle": ([\d.]+)'
)


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
