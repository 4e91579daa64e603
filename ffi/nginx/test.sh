#!/usr/bin/env bash
# Integration test of ngx_http_fairq_module against Debian's nginx: builds the module
# (build.sh; it must leave target/release/libfairq.a alone), then runs test_nginx.py (real nginx
# on 127.0.0.1, a temporary prefix, a capacity-limited asyncio upstream and asyncio clients;
# abandoned grants; a wrk load smoke; many light tenants' p99 through 8 permits against
# unlimited; nginx.conf.example through example-conf.sh; tenant names in /metrics; fleet mode
# against a redis-server), then the module built against an installed fairq (install.sh into a
# temporary prefix, build.sh FAIRQ_PKG_CONFIG=1, test_nginx.py --only example), then
# test_controls.py (every control directive). About 150 s after the builds.
# Arguments go to test_nginx.py (e.g. --only load, --only many-light).
#
# Installs nginx, nginx-dev, wrk and redis-server with apt-get when they are missing and this
# runs as root.
# FAIRQ_SKIP_NGINX=1 skips the test (for machines without nginx or apt).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [ "${FAIRQ_SKIP_NGINX:-0}" = 1 ]; then
    echo "nginx test skipped (FAIRQ_SKIP_NGINX=1)"
    exit 0
fi

if ! command -v nginx >/dev/null || [ ! -x /usr/share/nginx/src/configure ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing nginx nginx-dev"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx nginx-dev >/dev/null
    else
        echo "test.sh: needs nginx and nginx-dev (apt-get install -y nginx nginx-dev)" >&2
        exit 1
    fi
fi
for tool in redis-server wrk; do
    if ! command -v "$tool" >/dev/null; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            echo "installing $tool"
            apt-get update -qq >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null
        else
            echo "test.sh: needs $tool (apt-get install -y $tool)" >&2
            exit 1
        fi
    fi
done

root=$(cd "$here/../.." && pwd)
# build.sh builds the library in a target directory of its own: target/release stays as it was.
target_dir=$(cd "$root" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
release=$target_dir/release/libfairq.a
before=$(stat -c '%i %s %Y' "$release" 2>/dev/null || echo none)
module=$("$here/build.sh" | tail -n 1)
after=$(stat -c '%i %s %Y' "$release" 2>/dev/null || echo none)
if [ "$before" != "$after" ]; then
    echo "test.sh: build.sh changed $release ($before -> $after)" >&2
    exit 1
fi
status=0
# shellcheck source=run-checks.sh
. "$here/run-checks.sh"
run_checks "$here/test_nginx.py" --module "$module" --nginx "$(command -v nginx)" "$@" || status=1

# The module against an installed fairq, as a user with a packaged library builds it: install.sh
# into a temporary prefix (in the tree build's target directory, whose fleet-mode dependencies it
# reuses), build.sh with FAIRQ_PKG_CONFIG=1, then the
# example's checks with that module (nginx -t, requests, /metrics). No ".S" in the folder's name:
# nginx's configure would take it for an assembly source.
installed=$(mktemp -d /tmp/fairq-installed-XXXXXX)
chmod 755 "$installed"    # test_nginx.py runs nginx -t as nobody too
echo "== the module against fairq installed in $installed/prefix (pkg-config)"
if CARGO_TARGET_DIR=$target_dir/nginx-fleet "$root/ffi/c/install.sh" "$installed/prefix" \
        --features fleet >"$installed/install.log" 2>&1 \
    && PKG_CONFIG_PATH=$installed/prefix/lib/pkgconfig FAIRQ_PKG_CONFIG=1 \
        BUILD_DIR=$installed/build "$here/build.sh" >"$installed/build.log" 2>&1; then
    # The installed header and library, not this tree's.
    if grep -q "the installed fairq .* from $installed/prefix/lib (fleet mode: 1)" \
            "$installed/build.log" \
        && grep -q -- "-I $installed/prefix/include " "$installed/build/make.log" \
        && ! grep -q -- "-I $root/include " "$installed/build/make.log" \
        && grep -q -- "$installed/prefix/lib/libfairq.a" "$installed/build/make.log"; then
        echo "  ok   build.sh FAIRQ_PKG_CONFIG=1 compiled against $installed/prefix/include and" \
            "linked $installed/prefix/lib/libfairq.a"
        run_checks "$here/test_nginx.py" --module "$installed/build/ngx_http_fairq_module.so" \
            --nginx "$(command -v nginx)" --only example || status=1
    else
        echo "  FAIL build.sh FAIRQ_PKG_CONFIG=1 did not use the installed fairq" >&2
        cat "$installed/build.log" >&2
        status=1
    fi
else
    echo "  FAIL install.sh or build.sh FAIRQ_PKG_CONFIG=1 failed" >&2
    tail -n 20 "$installed/install.log" "$installed/build.log" >&2 2>/dev/null || true
    status=1
fi
if [ "$status" = 0 ]; then rm -rf "$installed"; else echo "(kept $installed for inspection)"; fi
# The controls (tiers, policies, pools, shedding): about 65 s, most of it the first feedback
# controller period (60 s, the shortest allowed) running while the other checks run.
run_checks "$here/test_controls.py" --module "$module" --nginx "$(command -v nginx)" || status=1
exit $status
