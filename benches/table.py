#!/usr/bin/env python3
"""Turns `compare --quick --json` runs into BENCHMARKS.md's tables: each contender's ns per cycle,
the ratios the targets are stated in, and the targets met or missed.

    target/release/examples/compare --quick --json > run.json && benches/table.py run.json
    benches/table.py run1.json ... run7.json     # several runs of the same build, in a row
    benches/table.py --record benches/recorded.json   # BENCHMARKS.md's generated block

The table's figures and ratios all come from one run: the only run given, or the last of several
(BENCHMARKS.md records the last of seven in a row, so no run of a batch is picked). With
several, a second table gives each figure's and each ratio's lowest and highest over all of
them; a ratio is only ever taken within one run, whose contenders shared the machine's state.
(A median over the runs would mix runs from the host's slow and fast stretches cell by cell.)

With --record, the input is the file benches/record.sh writes: {"provenance": {...}, "runs":
[{"results": [...], "hot": [...]}, ...]} ("hot": the rows of `compare --quick --hot --json` run
right after, optional); the output is the whole Markdown block between BENCHMARKS.md's
"recorded run" markers: how, when and on what the runs were made, both tables, the targets and
the hot-tenant table.
The same file always gives the same bytes, so CI can compare the committed block with it.
"""
import json
import sys

IMPLS = ["fairq", "fairq_lean", "floor", "mutex_swrr", "firq_core"]
RATIOS = [("fairq/floor", "fairq", "floor"), ("mutex/fairq", "mutex_swrr", "fairq"),
          ("firq/fairq", "firq_core", "fairq")]


def load(path):
    with open(path) as f:
        return by_case(json.load(f))


def by_case(doc):
    return {(r["impl"], r["tenants"], r["threads"]): r["ns_per_cycle"] for r in doc["results"]}


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
    lines = ["| threads | T | " + " | ".join(f"{i} ns" for i in IMPLS) + " | "
             + " | ".join(name for name, _, _ in RATIOS) + " |",
             "|---" * (len(IMPLS) + len(RATIOS) + 2) + "|"]
    for threads, tenants in cases:
        values = cells(runs, threads, tenants)
        shown = []
        for column, vals in enumerate(values):
            digits = 1 if column < len(IMPLS) else 2
            shown.append(show(vals, digits) if vals else "-")
        lines.append(f"| {threads} | {tenants} | " + " | ".join(shown) + " |")
    return lines


def last(vals, digits):
    return f"{vals[0]:.{digits}f}"


def spread(vals, digits):
    return f"{min(vals):.{digits}f}-{max(vals):.{digits}f}"


# The speed targets: (wording, [(label, value of one run or None, bound, "<=" or ">=")...]).
# A target is met in a run when every one of its cases is.
def ratio(ns, a, b, tenants, threads):
    x, y = ns.get((a, tenants, threads)), ns.get((b, tenants, threads))
    return x / y if x and y else None


def flatness(ns):
    """fairq's one-thread cycle at 16384 tenants over its cycle at one."""
    x, y = ns.get(("fairq", 16384, 1)), ns.get(("fairq", 1, 1))
    return x / y if x and y else None


def targets(tenant_counts):
    out = []
    cases = []
    for t in tenant_counts:
        bound = 2.5 if t >= 16384 else 2.0
        cases.append((f"T = {t}", lambda ns, t=t: ratio(ns, "fairq", "floor", t, 1), bound, "<="))
    out.append(("one thread: fairq/floor ≤ 2.0 up to 1024 tenants, ≤ 2.5 at 16384", cases))
    if 1 in tenant_counts and 16384 in tenant_counts:
        out.append(("flat in tenants, one thread: fairq at T = 16384 ≤ 1.3× fairq at T = 1",
                    [("", flatness, 1.3, "<=")]))
    for name, a, b, bound, threads_list in [
        ("fairq faster than mutex_swrr (mutex/fairq > 1), one and two threads",
         "mutex_swrr", "fairq", 1.0, (1, 2)),
        ("firq_core/fairq ≥ 5, one and two threads", "firq_core", "fairq", 5.0, (1, 2)),
    ]:
        cases = [(f"{th} thread{'s' if th > 1 else ''}, T = {t}",
                  lambda ns, t=t, th=th, a=a, b=b: ratio(ns, a, b, t, th),
                  bound, ">" if bound == 1.0 else ">=")
                 for th in threads_list for t in tenant_counts]
        out.append((name, cases))
    if 64 in tenant_counts:
        out.append(("two threads at T = 64: fairq ≥ 0.8× the floor's throughput (floor ns / "
                    "fairq ns)", [("", lambda ns: ratio(ns, "floor", "fairq", 64, 2), 0.8,
                                   ">=")]))
    return out


def holds(value, bound, op):
    return {"<=": value <= bound, ">=": value >= bound, ">": value > bound}[op]


def target_table(runs, tenant_counts):
    """One row per case of each target: its value in the last run, its lowest-highest over the
    runs, and in how many runs it was met."""
    n = len(runs)
    if n == 1:
        lines = ["| target | case | the run |", "|---|---|---|"]
    else:
        lines = [f"| target | case | last run | lowest-highest over the {n} runs | met in |",
                 "|---|---|---|---|---|"]
    for wording, cases in targets(tenant_counts):
        for index, (label, f, bound, op) in enumerate(cases):
            values = [v for v in (f(ns) for ns in runs) if v is not None]
            if not values:
                continue
            lv = f(runs[-1])
            shown = "-" if lv is None else f"{lv:.2f}"
            if lv is not None and not holds(lv, bound, op):
                shown += " (missed)"
            met = sum(holds(v, bound, op) for v in values)
            row = f"| {wording if index == 0 else ''} | {label or '-'} | {shown} |"
            if n > 1:
                row += f" {min(values):.2f}-{max(values):.2f} | {met} of {len(values)} runs |"
            lines.append(row)
    return lines


def hot_table(docs):
    """The hot-tenant runs (`compare --quick --hot --json`): each case's aggregate rate on one
    and two threads in the last run, and the two-thread/one-thread ratio over all runs."""
    def rates(doc):
        return {(r["tenants"], r["impl"], r["threads"]): r["cycles_per_sec"] / 1e6
                for r in doc["hot"]}
    runs = [rates(doc) for doc in docs if doc.get("hot")]
    if not runs:
        return []
    keys = sorted({(case, impl) for (case, impl, _) in runs[-1]},
                  key=lambda k: (k[0], IMPLS.index(k[1]) if k[1] in IMPLS else len(IMPLS)))
    n = len(runs)
    lines = [f"| case | contender | 1 thread Mcycles/s | 2 threads Mcycles/s | 2t/1t | 2t/1t "
             f"over the {n} runs | 2t/1t ≥ 0.8 in |", "|---" * 7 + "|"]
    for case, impl in keys:
        last_run = runs[-1]
        one, two = last_run.get((case, impl, 1)), last_run.get((case, impl, 2))
        ratios = [r[(case, impl, 2)] / r[(case, impl, 1)] for r in runs
                  if r.get((case, impl, 1)) and (case, impl, 2) in r]
        if one is None or two is None or not ratios:
            continue
        lines.append(f"| {case} | {impl} | {one:.2f} | {two:.2f} | {two / one:.2f} | "
                     f"{min(ratios):.2f}-{max(ratios):.2f} | "
                     f"{sum(x >= 0.8 for x in ratios)} of {len(ratios)} runs |")
    return lines


def span(started, ended):
    """'2026-12-07 00:10 UTC' to '2026-12-07 00:12 UTC' as '2026-12-07 00:10-00:12 UTC'."""
    day, _, time = started.partition(" ")
    if ended.startswith(day + " ") and started.endswith(" UTC") and ended.endswith(" UTC"):
        return f"{day} {time[:-4]}-{ended[len(day) + 1:]}"
    return f"{started} to {ended}"


def record(path):
    with open(path) as f:
        doc = json.load(f)
    p = doc["provenance"]
    runs = [by_case(run) for run in doc["runs"]]
    cases = sorted({(threads, tenants) for ns in runs for (_, tenants, threads) in ns})
    tenant_counts = sorted({t for _, t in cases})
    n = len(runs)
    made = p.get("runs_made", n)   # a record may keep fewer runs than it made
    lines = [
        f"- **Command**: `{p['command']}`: "
        + (f"{made} runs in a row" if made > 1 else "one run")
        + f" of `{p['each_run']}`"
        + (f" and `{p['each_hot_run']}`" if p.get("each_hot_run") else "")
        + (", the JSON of each" if made == n else
           "; the last one's JSON" if n == 1 else f"; the JSON of the last {n}")
        + " kept in [`benches/recorded.json`](benches/recorded.json).",
        f"- **When**: {span(p['started'], p['ended'])}; load average "
        + (p.get("load") or f"{p['load_before']} before, {p['load_after']} after") + ".",
        f"- **Build**: fairq {p['fairq_version']}, {p['rustc']}, release profile; source digest "
        + (f"`{digest}`" if (digest := p["source_digest"]).startswith("sha256:") else digest)
        + " (`benches/record.sh --digest` prints the current tree's).",
        f"- **Machine**: {p['machine']}.",
    ]
    if p.get("note"):
        lines.append(f"- **Note**: {p['note']}.")
    lines += [
        "",
        "The last run (a ratio is taken within one run):" if n > 1 else "The run:",
        "",
    ]
    lines += table(runs[-1:], cases, last)
    if n > 1:
        lines += ["", f"Lowest-highest over the {n} runs:", ""]
        lines += table(runs, cases, spread)
    lines += ["", "Against the targets (\"(missed)\": the " + ("last " if n > 1 else "")
              + "run missed that case):", ""]
    lines += target_table(runs, tenant_counts)
    hot = hot_table(doc["runs"])
    if hot:
        lines += ["", f"Hot tenants (`{p['each_hot_run']}`, in the same runs), aggregate rates; "
                  "the target is 2t/1t ≥ 0.8:", ""]
        lines += hot
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--record":
        sys.stdout.write(record(sys.argv[2]))
        return 0
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    runs = [load(path) for path in sys.argv[1:]]
    cases = sorted({(threads, tenants) for ns in runs for (_, tenants, threads) in ns})
    print("\n".join(table(runs[-1:], cases, last)))
    if len(runs) == 1:
        return 0
    print()
    print(f"Lowest-highest over the {len(runs)} runs:")
    print()
    print("\n".join(table(runs, cases, spread)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
