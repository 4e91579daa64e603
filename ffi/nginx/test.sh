#!/usr/bin/env bash
# Integration test of ngx_http_fairq_module against Debian's nginx: builds the module
# (build.sh), then runs test_nginx.py (real nginx on 127.0.0.1, a temporary prefix, a
# capacity-limited asyncio upstream and asyncio clients; abandoned grants; a wrk load smoke;
# many light tenants' p99 through 8 permits against unlimited; fleet mode against a
# redis-server), then test_controls.py (every control directive). About 130 s after the build.
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

module=$("$here/build.sh" | tail -n 1)
status=0
# shellcheck source=run-checks.sh
. "$here/run-checks.sh"
run_checks "$here/test_nginx.py" --module "$module" --nginx "$(command -v nginx)" "$@" || status=1
# The controls (tiers, policies, pools, shedding): about 65 s, most of it the first feedback
# controller period (60 s, the shortest allowed) running while the other checks run.
run_checks "$here/test_controls.py" --module "$module" --nginx "$(command -v nginx)" || status=1
exit $status
