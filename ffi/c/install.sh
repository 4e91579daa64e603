#!/usr/bin/env bash
# Installs fairq's C library into a prefix, laid out as C libraries are:
#
#   PREFIX/include/fairq.h
#   PREFIX/lib/libfairq.a
#   PREFIX/lib/libfairq.so.0.2.0          (SONAME libfairq.so.0)
#   PREFIX/lib/libfairq.so.0 -> libfairq.so.0.2.0
#   PREFIX/lib/libfairq.so   -> libfairq.so.0
#   PREFIX/lib/pkgconfig/fairq.pc
#
# The layout cargo-c's `cargo cinstall --release --prefix PREFIX` would make with the settings
# in Cargo.toml (CI does not run cargo-c), with cargo alone.
#
# Usage:  ffi/c/install.sh PREFIX [--library-type staticlib|cdylib] [cargo build options]
#
#   --library-type   install only the static (staticlib) or only the shared (cdylib) library, as
#                    cargo-c's option of that name does; with only libfairq.a in the prefix,
#                    `pkg-config --libs --static fairq` links it statically
#   cargo options    e.g. --features fleet
#
# Environment:
#   LIBDIR   where the libraries and pkgconfig/ go   (default PREFIX/lib)
#   DESTDIR  staging root, as with `make install`: files go to DESTDIR/PREFIX/..., while
#            fairq.pc still names PREFIX
#
# The SONAME carries the major version (0 for every 0.x release): under one SONAME the C ABI
# only grows. A library built with --features fleet also exports fairq_fleet_*, and its
# fairq.pc adds -DFAIRQ_FLEET to the compiler flags so that fairq.h declares them.
set -euo pipefail

usage() {
    echo "usage: ffi/c/install.sh PREFIX [--library-type staticlib|cdylib] [cargo options]" >&2
    exit 2
}
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
    usage
fi
prefix=$1
shift
static=1 shared=1
if [ "${1:-}" = --library-type ]; then
    case "${2:-}" in
        staticlib) shared=0 ;;
        cdylib) static=0 ;;
        *) usage ;;
    esac
    shift 2
fi
case "$prefix" in
    /*) ;;
    *) echo "install.sh: PREFIX must be an absolute path, got '$prefix'" >&2; exit 2 ;;
esac
prefix=${prefix%/}
libdir=${LIBDIR:-$prefix/lib}
destdir=${DESTDIR:-}

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

meta=$(cargo metadata --format-version 1 --no-deps)
field() { python3 -c 'import json,sys; m=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$meta" "$1"; }
version=$(field '[p for p in m["packages"] if p["name"] == "fairq"][0]["version"]')
target_dir=$(field 'm["target_directory"]')
major=${version%%.*}
soname=libfairq.so.$major

# Only the C library's crate types, linked with the SONAME. --print native-static-libs names
# the system libraries a static link needs (cargo replays it when the build is fresh).
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! cargo rustc --release -p fairq --lib --crate-type staticlib,cdylib "$@" -- \
    -C "link-arg=-Wl,-soname,$soname" --print native-static-libs 2>"$log"; then
    cat "$log" >&2
    exit 1
fi
native=$(sed -n 's/.*native-static-libs: //p' "$log" | tail -n 1)
if [ -z "$native" ]; then
    cat "$log" >&2
    echo "install.sh: rustc did not print the native static libraries" >&2
    exit 1
fi
out=$target_dir/release
for f in libfairq.a libfairq.so; do
    [ -f "$out/$f" ] || { echo "install.sh: $out/$f was not built" >&2; exit 1; }
done
if command -v readelf >/dev/null \
    && ! readelf -d "$out/libfairq.so" | grep "Library soname: \[$soname\]" >/dev/null; then
    echo "install.sh: $out/libfairq.so has no SONAME $soname" >&2
    exit 1
fi

cflags='-I${includedir}'
if nm -D --defined-only "$out/libfairq.so" 2>/dev/null | grep ' T fairq_fleet_new$' >/dev/null; then
    cflags="$cflags -DFAIRQ_FLEET"
fi

inc=$destdir$prefix/include
lib=$destdir$libdir
install -d "$inc" "$lib/pkgconfig"
install -m 644 include/fairq.h "$inc/fairq.h"
installed=("$inc/fairq.h")
if [ $static = 1 ]; then
    install -m 644 "$out/libfairq.a" "$lib/libfairq.a"
    # The release profile carries no debug info, but the Rust standard library's objects in
    # the archive keep theirs: drop it, as distributions do for static libraries.
    if command -v strip >/dev/null; then
        strip --strip-debug "$lib/libfairq.a"
    fi
    installed+=("$lib/libfairq.a")
fi
if [ $shared = 1 ]; then
    install -m 755 "$out/libfairq.so" "$lib/libfairq.so.$version"
    ln -sfn "libfairq.so.$version" "$lib/$soname"
    ln -sfn "$soname" "$lib/libfairq.so"
    installed+=("$lib/libfairq.so.$version" "$lib/$soname" "$lib/libfairq.so")
fi
installed+=("$lib/pkgconfig/fairq.pc")

# ${libdir} relative to ${prefix} when it lies inside it, so the file can be relocated.
case "$libdir" in
    "$prefix"/*) pc_libdir="\${prefix}${libdir#"$prefix"}" ;;
    *) pc_libdir=$libdir ;;
esac
cat >"$lib/pkgconfig/fairq.pc" <<EOF
prefix=$prefix
exec_prefix=\${prefix}
libdir=$pc_libdir
includedir=\${prefix}/include

Name: fairq
Description: Lock-free multi-tenant weighted fair admission queue (C API)
Version: $version
Libs: -L\${libdir} -lfairq
Libs.private: $native
Cflags: $cflags
EOF
chmod 644 "$lib/pkgconfig/fairq.pc"

echo "installed fairq $version (SONAME $soname):"
printf '  %s\n' "${installed[@]}"

# A program linked against the shared library must find it at run time too. Say how, unless
# the dynamic linker already searches the libdir (ldconfig's cache or its default directories).
if [ $shared = 1 ] && [ -z "$destdir" ]; then
    searched=$( (ldconfig -v -N 2>/dev/null || true) | sed -n 's|^\(/[^:]*\):.*|\1|p')
    if ! printf '%s\n' "$searched" /lib /usr/lib | grep -qxF "$libdir"; then
        cat <<EOF

$libdir is not searched by the dynamic linker, so programs linked against
$soname will not start ("cannot open shared object file") until one of:
  - sudo sh -c 'echo $libdir > /etc/ld.so.conf.d/fairq.conf' && sudo ldconfig
  - export LD_LIBRARY_PATH=$libdir
  - link with -Wl,-rpath,$libdir (pkg-config gives -L$libdir -lfairq)
  - link statically: \$(pkg-config --static --libs fairq) with --library-type staticlib
EOF
    elif [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then
        ldconfig
    fi
fi
