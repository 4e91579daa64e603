#!/usr/bin/env bash
# What the locked instructions cost one thread: builds `compare` twice, as is and with every
# read-modify-write done as a plain load and store (`--cfg fairq_plain_rmw`, see src/sync.rs; a
# measurement build only, wrong with two threads), then times the two in turn (benches/ab.py).
# The difference is what fairq's atomic read-modify-writes cost a one-thread cycle.
#
#   benches/rmw_cost.sh [rounds, default 6] [extra compare args, default --tenants 1,64,1024]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-6}"
shift || true
[ $# -gt 0 ] || set -- --tenants 1,64,1024
cargo build --release --example compare >&2
RUSTFLAGS="--cfg fairq_plain_rmw" CARGO_TARGET_DIR=target/plain-rmw \
    cargo build --release --example compare >&2
mkdir -p target/rmw-cost
cp target/release/examples/compare target/rmw-cost/atomic
cp target/plain-rmw/release/examples/compare target/rmw-cost/plain_rmw
chrt=()
[ "$(id -u)" = 0 ] && chrt=(--chrt)
python3 benches/ab.py target/rmw-cost/atomic target/rmw-cost/plain_rmw --rounds "${rounds}" \
    "${chrt[@]}" -- --threads 1 --impls fairq,fairq_lean,mutex_swrr "$@"
