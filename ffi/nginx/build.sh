#!/usr/bin/env bash
# Builds ngx_http_fairq_module.so, a dynamic module for the installed nginx.
#
# Needs Debian's nginx and nginx-dev (apt-get install -y nginx nginx-dev): nginx-dev ships the
# configure tree (auto/, the headers, and conf_flags, the configure arguments of Debian's nginx)
# under /usr/share/nginx/src. Configuring a copy of it with the same arguments plus
# --add-dynamic-module gives a module whose signature matches the installed binary
# (--with-compat).
#
# The library (library.sh): this repository's, built by cargo into a target directory of its
# own (target/nginx-fleet; target/release is left alone), or a prebuilt one:
#
#   ffi/c/install.sh /opt/fairq --features fleet
#   PKG_CONFIG_PATH=/opt/fairq/lib/pkgconfig FAIRQ_PKG_CONFIG=1 ffi/nginx/build.sh
#
# Environment:
#   NGX_SRC     the configure tree       (default /usr/share/nginx/src)
#   BUILD_DIR   where to build           (default ffi/nginx/build; git-ignored)
#   FAIRQ_PKG_CONFIG  1: link the installed fairq that pkg-config finds (its fairq.h and
#               libfairq.a); nothing is built with cargo
#   FAIRQ_FLEET 1: fleet mode (fairq_fleet_* directives, -DFAIRQ_FLEET)   (default 1, or with
#               FAIRQ_PKG_CONFIG=1 the installed library's mode)
#               0: without it; fairq_fleet_redis is then refused by nginx -t
#   FAIRQ_LIB   a prebuilt libfairq.a    (default: cargo build --release -p fairq --target-dir
#               target/nginx-fleet --features fleet; target/nginx-default without fleet). With
#               FAIRQ_FLEET=1 it must be a fleet build: checked with nm.
#   JOBS        make -j                  (default 2)
# Output: $BUILD_DIR/ngx_http_fairq_module.so (the path is printed last).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
NGX_SRC=${NGX_SRC:-/usr/share/nginx/src}
BUILD_DIR=${BUILD_DIR:-$here/build}
JOBS=${JOBS:-2}

if [ ! -f "$NGX_SRC/conf_flags" ] || [ ! -x "$NGX_SRC/configure" ]; then
    echo "build.sh: no nginx configure tree at $NGX_SRC (apt-get install -y nginx nginx-dev)" >&2
    exit 1
fi

# FAIRQ_INCLUDE, FAIRQ_LIB and FAIRQ_FLEET, for config.
# shellcheck source=library.sh
. "$here/library.sh"
fairq_library build.sh "$root" || exit 1

# A private copy of the configure tree: configure writes objs/ and a Makefile next to it.
src=$BUILD_DIR/nginx-src
rm -rf "$src"
mkdir -p "$src"
cp -a "$NGX_SRC/." "$src/"

# shellcheck disable=SC1091
. "$src/conf_flags"          # NGX_CONF_FLAGS=( ... ), Debian's configure arguments

cd "$src"
./configure "${NGX_CONF_FLAGS[@]}" \
    --with-cc-opt="-g -O2 -fPIC -fstack-protector-strong -Wformat -Werror=format-security -D_FORTIFY_SOURCE=2" \
    --with-ld-opt="-Wl,-z,relro -Wl,-z,now -fPIC" \
    --add-dynamic-module="$here" >"$BUILD_DIR/configure.log" 2>&1 \
    || { tail -30 "$BUILD_DIR/configure.log" >&2; exit 1; }
make -j"$JOBS" -f objs/Makefile modules >"$BUILD_DIR/make.log" 2>&1 \
    || { tail -40 "$BUILD_DIR/make.log" >&2; exit 1; }
grep -iE "warning" "$BUILD_DIR/make.log" >&2 || true

# Copy, then rename: an nginx running the previous module keeps its mapping of the old file
# (copying over a mapped library would crash its workers).
cp objs/ngx_http_fairq_module.so "$BUILD_DIR/ngx_http_fairq_module.so.new"
mv -f "$BUILD_DIR/ngx_http_fairq_module.so.new" "$BUILD_DIR/ngx_http_fairq_module.so"
echo "$BUILD_DIR/ngx_http_fairq_module.so"
