#!/usr/bin/env bash
# The NGINX module built from an nginx source tree instead of Debian's nginx-dev, then the same
# integration test as test.sh (test_nginx.py) against the nginx binary built from that tree.
#
# The source tree is nginx's own release tarball as Debian ships it (the orig tarball of the
# `nginx` source package, the upstream release unchanged, no Debian patches), fetched with
# `apt-get source --download-only` through a private apt configuration with deb-src entries
# (made from the system's deb entries; the system's apt settings are not touched) and cached
# under target/nginx-source. NGINX_SRC=DIR uses an unpacked release instead, from anywhere.
# Then build-from-source.sh: ./configure --with-compat --add-dynamic-module=ffi/nginx; make; and
# the module alone loaded into the system's nginx of the same release, when there is one.
#
# Needs a C compiler, make, PCRE2 and zlib headers (libpcre2-dev zlib1g-dev: installed with
# apt-get when missing and this runs as root), python3, redis-server (test_nginx.py's fleet
# checks) and wrk (its load smoke). About 1 min to build nginx and 50 s of test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=$root/target/nginx-source

apt_install() {
    local log
    log=$(mktemp)
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
        >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
}
missing=()
command -v make >/dev/null || missing+=(make)
[ -f /usr/include/pcre2.h ] || missing+=(libpcre2-dev)
[ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v wrk >/dev/null || missing+=(wrk)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}"
    apt_install "${missing[@]}"
fi

# The upstream tarball of Debian's nginx source package, through apt-get source.
fetch_source() {
    local apt=$cache/apt
    rm -rf "$apt" && mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources"
    # deb-src twins of the system's deb822 entries for the main archive (the security archive
    # carries only Debian's revisions of the same upstream release).
    local file
    for file in /etc/apt/sources.list.d/*.sources; do
        [ -f "$file" ] || continue
        awk 'BEGIN { RS = ""; ORS = "\n\n" } /(^|\n)Types:[^\n]*deb/ && !/security/' "$file" \
            | sed 's/^Types:.*/Types: deb-src/' >>"$apt/sources/src.sources"
    done
    # One-line entries (sources.list), the same way.
    if [ -f /etc/apt/sources.list ]; then
        sed -n 's/^deb \(.*\)$/deb-src \1/p' /etc/apt/sources.list | grep -v security \
            >"$apt/sources/src.list" || true
    fi
    local opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt/sources"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
    local log=$apt/apt.log
    if ! apt-get "${opts[@]}" update >"$log" 2>&1 \
        || ! (cd "$cache" && apt-get "${opts[@]}" source --download-only nginx) >>"$log" 2>&1; then
        cat "$log" >&2
        echo "source-test.sh: apt-get source nginx failed; set NGINX_SRC to an unpacked nginx" \
            "release instead" >&2
        return 1
    fi
    local tarball
    tarball=$(ls "$cache"/nginx_*.orig.tar.gz | tail -n 1)
    tar -xzf "$tarball" -C "$cache"
    echo "unpacked $(basename "$tarball")"
}

if [ -z "${NGINX_SRC:-}" ]; then
    NGINX_SRC=$(ls -d "$cache"/nginx-*/ 2>/dev/null | tail -n 1 || true)
    if [ -z "$NGINX_SRC" ]; then
        fetch_source
        NGINX_SRC=$(ls -d "$cache"/nginx-*/ | tail -n 1)
    fi
fi

build=$root/target/nginx-source/build
# --error-log-path: before it reads its configuration nginx logs to the compiled-in path, which
# the test's temporary prefix does not have.
module=$(BUILD_DIR=$build "$here/build-from-source.sh" "$NGINX_SRC" \
    --error-log-path=/dev/stderr | tail -n 1)
"$build/nginx" -V 2>&1 | sed -n 1p    # sed reads it all: head would close the pipe early (SIGPIPE)
# Exit status 3: only timing checks failed; run-checks.sh runs the script again (twice at most).
# shellcheck source=run-checks.sh
. "$here/run-checks.sh"
run_checks "$here/test_nginx.py" --module "$module" --nginx "$build/nginx" "$@" || exit 1

# --with-compat: the module alone (make modules, default configure options) loads into another
# nginx of the same release configured --with-compat, such as Debian's, when one is installed.
version=$("$build/nginx" -v 2>&1 | sed -n 's|.*nginx/||p')
system=$(command -v nginx || true)
if [ -n "$system" ] && [ "$("$system" -v 2>&1 | sed -n 's|.*nginx/||p')" = "$version" ]; then
    only=$root/target/nginx-source/modules-only
    module=$(BUILD_DIR=$only MODULES_ONLY=1 "$here/build-from-source.sh" "$NGINX_SRC" \
        | tail -n 1)
    conf=$only/prefix/nginx.conf
    mkdir -p "$only/prefix/logs"
    printf '%s\n' "load_module $module;" "error_log $only/prefix/logs/error.log;" \
        "pid $only/prefix/nginx.pid;" "events {}" "http {" "    fairq_max_in_flight 4;" \
        "    server {" "        listen 127.0.0.1:1;" \
        '        location / { fairq on; fairq_tenant $http_x_api_key; return 200; }' \
        "    }" "}" >"$conf"
    "$system" -t -p "$only/prefix" -c "$conf"
    echo "ok: the module built alone from the source tree loads into $system ($version)"
else
    echo "not checked: the module alone in a system nginx $version (none installed)"
fi
