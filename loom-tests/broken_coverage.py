#!/usr/bin/env python3
"""Checks that every broken variant was caught by name.

Reads the variants of `Break` (src/broken.rs), finds each `broken_*` twin (a test with
`#[should_panic(expected = ...)]` whose body switches on `Break::<Variant>`) in loom-tests/tests
and src/, and reads the broken run's log (cargo test output): a twin caught its variant if it
ran and did not fail, and its `expected` message is what made it pass (cargo fails a
should_panic test whose panic message lacks it). Exits 1 if a variant has no twin, a twin has no
expected message, or a variant's twins did not all pass.

Usage: broken_coverage.py LOG
"""

import os
import re
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
log = open(sys.argv[1], errors="replace").read()

enum = open(os.path.join(root, "src/broken.rs")).read()
body = enum[enum.index("pub enum Break {"):]
body = body[:body.index("\n}")]
variants = re.findall(r"^    ([A-Z][A-Za-z]*),$", body, re.M)

sources = []
for base in ("loom-tests/tests", "src"):
    for d, _, files in os.walk(os.path.join(root, base)):
        sources += [os.path.join(d, f) for f in files if f.endswith(".rs")]

twins = {}          # (file, test name) -> (variant, expected message or None)
test = re.compile(r"#\[should_panic(?:\(expected = \"((?:[^\"\\]|\\.)*)\"\))?\]\s*"
                  r"(?:#\[[^\]]*\]\s*)*fn (broken_\w+)\(\)\s*\{")
for path in sources:
    text = open(path).read()
    for m in test.finditer(text):
        end = text.find("\n}", m.end())
        end2 = text.find("\n    }", m.end())
        end = min(e for e in (end, end2) if e >= 0)
        named = set(re.findall(r"Break::([A-Z][A-Za-z]*)", text[m.end():end]))
        for v in named:
            twins[(os.path.relpath(path, root), m.group(2))] = (v, m.group(1))

ran = set(re.findall(r"^test (?:\S+::)?(broken_\w+) - should panic", log, re.M))
failed = set(re.findall(r"^    (?:\S+::)?(broken_\w+)$", log, re.M))
failed |= set(re.findall(r"^test (?:\S+::)?(broken_\w+) - should panic \.\.\. FAILED", log, re.M))

bad = 0
for v in variants:
    mine = sorted(k for k, (var, _) in twins.items() if var == v)
    if not mine:
        print(f"  MISSING  {v}: no broken twin switches it on")
        bad += 1
        continue
    # A name two files share counts as failed if either failed (the log names tests only).
    for path, n in mine:
        _, expected = twins[(path, n)]
        if expected is None:
            state, bad = "NO EXPECTED MESSAGE", bad + 1
        elif n not in ran:
            state, bad = "DID NOT RUN", bad + 1
        elif n in failed:
            state, bad = "NOT CAUGHT", bad + 1
        else:
            state = "caught"
        print(f"  {state:8s} {v:12s} {n} ({path}): \"{expected}\"")
print(f"broken variants: {len(variants)}, twins: {len(twins)}, problems: {bad}")
sys.exit(1 if bad else 0)
