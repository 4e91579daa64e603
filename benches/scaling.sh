#!/usr/bin/env bash
# Multi-thread scaling: runs the grant-cycle comparison with 1, 2, 4, 8 and 16 threads and writes
# a Markdown table (aggregate millions of cycles per second, and the ratios) to stdout and to
# target/scaling.md. Meant for machines with more cores than threads asked for; on a 2-core
# machine the 4-16 thread rows only show oversubscription.
#
#   benches/scaling.sh [extra compare args, e.g. --quick or --tenants 64,1024]
set -euo pipefail
cd "$(dirname "$0")/.."
threads="${FAIRQ_SCALING_THREADS:-1,2,4,8,16}"
cargo build --release --example compare >&2
out=target/scaling.md
{
    echo "## fairq scaling: threads ${threads}"
    echo
    echo "$(nproc) cores, $(uname -m), load before the run: $(cut -d' ' -f1-3 /proc/loadavg)," \
        "$(date -u +%Y-%m-%dT%H:%MZ)."
    echo "Command: \`benches/scaling.sh $*\` (compare --threads ${threads} --markdown)."
    echo
    target/release/examples/compare --threads "${threads}" --markdown "$@"
} | tee "${out}"
echo "wrote ${out}" >&2
