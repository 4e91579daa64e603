#!/usr/bin/env bash
# Prints nginx.conf.example ready to run: load_module names the built module, the server listens
# on a free port of 127.0.0.1, and the pid file, logs and temp folders are under PREFIX (made
# here: PREFIX/logs, PREFIX/temp).
#
#   ffi/nginx/build.sh
#   ffi/nginx/example-conf.sh /tmp/fairq-example > /tmp/fairq-example/nginx.conf
#   nginx -t -p /tmp/fairq-example -c /tmp/fairq-example/nginx.conf
#   nginx -p /tmp/fairq-example -c /tmp/fairq-example/nginx.conf    # port: see its listen line
#
# Usage: ffi/nginx/example-conf.sh PREFIX [MODULE]
#   MODULE    the module's .so   (default ffi/nginx/build/ngx_http_fairq_module.so, build.sh's)
# Environment:
#   PORT      the port to listen on              (default: one free now, from the kernel)
#   UPSTREAM  host:port of the upstream          (default 127.0.0.1:8080, as in the example)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ -z "$1" ]; then
    echo "usage: ffi/nginx/example-conf.sh PREFIX [MODULE]" >&2
    exit 2
fi
# nginx reads a path up to a space or ';' and expands '$' in some (access_log): keep to plain
# characters rather than quote.
plain() {
    if ! [[ $1 =~ ^[A-Za-z0-9_./+,:@%=-]+$ ]]; then
        echo "example-conf.sh: '$1' has characters nginx.conf would need quoted" >&2
        exit 2
    fi
}
module=${2:-$here/build/ngx_http_fairq_module.so}
if [ ! -f "$module" ]; then
    echo "example-conf.sh: no module at $module (build it: ffi/nginx/build.sh)" >&2
    exit 1
fi
module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
plain "$module"
plain "$1"
mkdir -p "$1/logs" "$1/temp"
prefix=$(cd "$1" && pwd)
plain "$prefix"
port=${PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
upstream=${UPSTREAM:-127.0.0.1:8080}

# A replacement for sed's s|||: backslash, & and the delimiter escaped.
esc() { printf '%s' "$1" | sed -e 's/[\\&|]/\\&/g'; }

# The example's placeholders: the module path, the ports, and paths relative to nginx's prefix
# (logs/..., temp/...), made absolute under PREFIX.
sed -e "s|^load_module /path/to/ngx_http_fairq_module.so;|load_module $(esc "$module");|" \
    -e "s|^\( *listen\) 127.0.0.1:8000;|\1 127.0.0.1:$(esc "$port");|" \
    -e "s|^\( *server\) 127.0.0.1:8080;|\1 $(esc "$upstream");|" \
    -e "s|^\( *[a-z_]*\) logs/|\1 $(esc "$prefix")/logs/|" \
    -e "s|^\( *[a-z_]*_temp_path\) temp/|\1 $(esc "$prefix")/temp/|" \
    "$here/nginx.conf.example"
