#!/usr/bin/env bash
# Runs the C test suites under valgrind memcheck; any memory error or definite leak fails.
# Usage: ffi/c/valgrind.sh [profile]   (default: debug; needs `cargo build` or `cargo test` first)
# The stress test runs fewer iterations here (FAIRQ_STRESS_ITERS): valgrind serialises threads
# and runs ~30x slower, and memcheck needs coverage of the paths, not 10^6 repetitions of them.
set -euo pipefail
cd "$(dirname "$0")/../.."
profile="${1:-debug}"
lib="target/$profile/libfairq.a"
[ -f "$lib" ] || lib="target/$profile/deps/libfairq.a"
out="target/ffi-c"
mkdir -p "$out"
for suite in test_fairq test_controls; do
    cc -std=c11 -Wall -Wextra -Wpedantic -Werror -g -Iinclude "ffi/c/$suite.c" "$lib" \
        -lpthread -ldl -lm -o "$out/$suite"
    echo "== $suite under valgrind"
    FAIRQ_STRESS_ITERS="${FAIRQ_STRESS_ITERS:-20000}" valgrind --quiet --error-exitcode=1 \
        --leak-check=full --errors-for-leak-kinds=definite "$out/$suite"
done
