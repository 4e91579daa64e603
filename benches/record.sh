#!/usr/bin/env bash
# BENCHMARKS.md's reference run: `compare --quick --json` several times in a row (default 7, as
# recorded there), each run's JSON kept in target/record/, then benches/table.py on them: the
# last run's table and each figure's lowest-highest over all the runs. Under `chrt -f 50` when
# run as root (one and two threads only, never more threads than cores).
#
#   benches/record.sh [runs, default 7]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-7}"
cargo build --release --example compare >&2
rm -rf target/record
mkdir -p target/record
chrt=()
[ "$(id -u)" = 0 ] && chrt=(chrt -f 50)
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for i in $(seq "$runs"); do
    "${chrt[@]}" target/release/examples/compare --quick --json > "target/record/run$i.json"
done
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 benches/table.py $(for i in $(seq "$runs"); do echo "target/record/run$i.json"; done)
