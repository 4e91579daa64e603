#!/usr/bin/env bash
# Builds the Envoy dynamic module: target/release/libfairq_envoy.so (Envoy loads lib<name>.so for
# the module name "fairq_envoy" from ENVOY_DYNAMIC_MODULES_SEARCH_PATH). Cargo only; the
# registries are the only network it needs.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build -p fairq-envoy --release "$@"
echo "built $PWD/target/release/libfairq_envoy.so"
