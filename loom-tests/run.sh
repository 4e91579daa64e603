#!/usr/bin/env bash
# Runs fairq's loom models (loom-tests/tests/*.rs) against the engine's real code, then the
# deliberately broken variants, each of which one model must catch.
#
#   loom-tests/run.sh                 # every model, then every broken variant
#   loom-tests/run.sh tickets         # one model file (a `cargo test --test` name)
#   LOOM_MAX_PREEMPTIONS=3 loom-tests/run.sh   # a deeper search (passes; about 2.5 min here)
#   FAIRQ_LOOM_BROKEN=0 loom-tests/run.sh      # skip the broken variants
#
# A failure prints loom's panic; rerun that model with LOOM_LOG=1 (and LOOM_LOCATION=1) to see
# the interleaving. One build serves both halves: `--cfg loom --cfg fairq_broken` in target/loom
# (so it never invalidates the normal build). A broken variant stays off unless its `broken_`
# test switches it on, so the models run the real code.
set -euo pipefail
cd "$(dirname "$0")/.."

export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-0}"
export RUSTFLAGS="--cfg loom --cfg fairq_broken -C debug-assertions=on"
mkdir -p target
tests=()
for name in "$@"; do tests+=(--test "$name"); done
if [ ${#tests[@]} -eq 0 ]; then tests=(--tests); fi

echo "== loom models (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS)"
started=$SECONDS
# The engine-level models (loom-tests/tests), then the models that sit beside the primitives
# they prove (`loom_models` modules inside the crate), unless one model file was named.
{
    cargo test --release --no-fail-fast -p fairq-loom-tests --target-dir target/loom \
        "${tests[@]}" -- --nocapture --test-threads=1 --skip broken_
    if [ $# -eq 0 ]; then
        cargo test --release --no-fail-fast -p fairq --lib --target-dir target/loom \
            loom_models -- --nocapture --test-threads=1 --skip broken_
        # The Envoy module's hand-over of a grant between worker threads.
        cargo test --release --no-fail-fast -p fairq-envoy --lib --target-dir target/loom \
            loom_models -- --nocapture --test-threads=1 --skip broken_
    fi
} 2>&1 | tee target/loom-models.log | grep -v '^$'
echo "loom models: $((SECONDS - started)) s"

if [ "${FAIRQ_LOOM_BROKEN:-1}" = 0 ]; then
    exit 0
fi

# Each `broken_*` test switches on one broken variant (src/broken.rs) and expects its model
# to panic with the violation it guards against (`#[should_panic(expected = ...)]`): proof that
# the model can fail, and fails for that reason.
echo "== broken variants (each must be caught)"
started=$SECONDS
{
    cargo test --release --no-fail-fast -p fairq-loom-tests --target-dir target/loom \
        "${tests[@]}" -- --nocapture --test-threads=1 broken_
    if [ $# -eq 0 ]; then
        cargo test --release --no-fail-fast -p fairq --lib --target-dir target/loom \
            broken_ -- --nocapture --test-threads=1
        cargo test --release --no-fail-fast -p fairq-envoy --lib --target-dir target/loom \
            broken_ -- --nocapture --test-threads=1
    fi
} 2>&1 | tee target/loom-broken.log |
    grep -E '^(test |thread .* panicked|[a-z].*(failed|lost|broken|below zero)|test result|error)' || true
# grep above only trims the output; the verdict is cargo's exit status, re-read from the log.
if grep -qE '^test result: FAILED|^error' target/loom-broken.log; then
    echo "a broken variant was NOT caught (see target/loom-broken.log)"
    exit 1
fi
caught=$(sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p' target/loom-broken.log |
    awk '{ n += $1 } END { print n + 0 }')
if [ "$caught" -eq 0 ]; then
    echo "no broken variant ran (see target/loom-broken.log)"
    exit 1
fi
# Every variant of `Break` must have a twin that names the violation it expects, and be caught.
# With one model file named, only that file's twins ran: the check would report the others.
if [ $# -eq 0 ]; then
    python3 loom-tests/broken_coverage.py target/loom-broken.log || exit 1
fi
echo "broken twins caught: $caught, in $((SECONDS - started)) s"
