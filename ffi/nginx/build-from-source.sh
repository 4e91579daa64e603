#!/usr/bin/env bash
# Builds nginx and ngx_http_fairq_module from an nginx source tree (an unpacked nginx-1.x.y
# release), the way nginx is built with any third-party dynamic module:
#
#   cd nginx-1.x.y
#   ./configure --with-compat --add-dynamic-module=/path/to/fairq/ffi/nginx [your options]
#   make              # objs/nginx and objs/ngx_http_fairq_module.so
#
# This script runs exactly that, after building libfairq.a, and copies the two results out.
# --with-compat makes the module loadable (load_module) into any nginx of the same version that
# was also configured --with-compat, so MODULES_ONLY=1 (make modules) is enough for an nginx you
# already run, built from the same release.
#
# Usage: ffi/nginx/build-from-source.sh NGINX_SRC [more configure options]
#
# Environment:
#   BUILD_DIR    where objs/ and the results go   (default ffi/nginx/build/source; git-ignored)
#   FAIRQ_FLEET  1: fleet mode (-DFAIRQ_FLEET, library with --features fleet); 0: without it
#                (default 1, or with FAIRQ_PKG_CONFIG=1 the installed library's mode)
#   FAIRQ_LIB    a prebuilt libfairq.a            (default: cargo build --release -p fairq
#                --target-dir target/nginx-fleet --features fleet; target/nginx-default without
#                fleet; target/release is left alone)
#   FAIRQ_PKG_CONFIG  1: the installed fairq that pkg-config finds instead (library.sh)
#   MODULES_ONLY 1: build only the module (make modules)   (default 0)
#   JOBS         make -j                          (default 2)
# Output: BUILD_DIR/nginx (unless MODULES_ONLY=1) and BUILD_DIR/ngx_http_fairq_module.so; the
# module's path is printed last. Configure and make logs: BUILD_DIR/configure.log, make.log.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ $# -lt 1 ] || [ ! -x "$1/configure" ] || [ ! -d "$1/src/http" ]; then
    echo "usage: ffi/nginx/build-from-source.sh NGINX_SRC [configure options]" >&2
    echo "  NGINX_SRC: an unpacked nginx source release (with ./configure and src/http/)" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
shift
BUILD_DIR=${BUILD_DIR:-$here/build/source}
MODULES_ONLY=${MODULES_ONLY:-0}
JOBS=${JOBS:-2}
mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)

# ffi/nginx/config reads these: the header's folder, the library, fleet mode on or off.
# shellcheck source=library.sh
. "$here/library.sh"
fairq_library build-from-source.sh "$root" || exit 1
cd "$src"
echo "nginx $(sed -n 's/^#define NGINX_VERSION *"\(.*\)"/\1/p' src/core/nginx.h) from $src" >&2
# The build folder and the module, relative to the source tree: nginx's configure rewrites every
# `X.S` in an object's path as an assembly source's object, so an absolute path with ".S" in it
# (a temporary folder such as /tmp/tmp.Sx3...) yields a Makefile with broken targets.
objs=$(realpath -m --relative-to="$src" "$BUILD_DIR/objs")
module=$(realpath -m --relative-to="$src" "$here")
case "$objs $module" in
    *.S*) echo "build-from-source.sh: nginx's configure cannot use $objs or $module (\".S\" in" \
        "a path): choose another BUILD_DIR, or move the trees" >&2; exit 2;;
esac
./configure --with-compat --add-dynamic-module="$module" --builddir="$objs" "$@" \
    >"$BUILD_DIR/configure.log" 2>&1 \
    || { tail -30 "$BUILD_DIR/configure.log" >&2; exit 1; }
goal=build
[ "$MODULES_ONLY" = 1 ] && goal=modules
make -j"$JOBS" -f "$objs/Makefile" "$goal" >"$BUILD_DIR/make.log" 2>&1 \
    || { tail -40 "$BUILD_DIR/make.log" >&2; exit 1; }
grep -i "warning" "$BUILD_DIR/make.log" >&2 || true

if [ "$MODULES_ONLY" != 1 ]; then
    cp "$BUILD_DIR/objs/nginx" "$BUILD_DIR/nginx"
fi
# Copy, then rename: an nginx running the previous module keeps its mapping of the old file.
cp "$BUILD_DIR/objs/ngx_http_fairq_module.so" "$BUILD_DIR/ngx_http_fairq_module.so.new"
mv -f "$BUILD_DIR/ngx_http_fairq_module.so.new" "$BUILD_DIR/ngx_http_fairq_module.so"
echo "$BUILD_DIR/ngx_http_fairq_module.so"
