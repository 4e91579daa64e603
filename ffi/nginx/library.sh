# Sourced by build.sh and build-from-source.sh: picks the fairq library the module links and
# exports what `config` reads (FAIRQ_INCLUDE, FAIRQ_LIB, FAIRQ_FLEET).
#
# fairq_library NAME ROOT: NAME prefixes the messages, ROOT is this repository.
#
#   FAIRQ_PKG_CONFIG=1  an installed fairq, found by pkg-config (set PKG_CONFIG_PATH to
#                       PREFIX/lib/pkgconfig for `ffi/c/install.sh PREFIX`): its fairq.h and its
#                       libfairq.a. FAIRQ_FLEET defaults to the installed library's mode (its
#                       fairq.pc adds -DFAIRQ_FLEET to the compiler flags when it has it).
#   FAIRQ_LIB=PATH      that libfairq.a, with this repository's include/.
#   neither             this repository's library, built by cargo in a target directory of its
#                       own (nginx-fleet, or nginx-default with FAIRQ_FLEET=0, under cargo's
#                       target directory), so target/release keeps whatever was built there.
#
# FAIRQ_FLEET (default 1, or the installed library's mode): 1 compiles fleet mode in, and the
# library must then export fairq_fleet_* (checked with nm); 0 leaves it out.
fairq_library() {
    local name=$1 root=$2
    if [ "${FAIRQ_PKG_CONFIG:-0}" = 1 ]; then
        [ -z "${FAIRQ_LIB:-}" ] || {
            echo "$name: set FAIRQ_PKG_CONFIG=1 or FAIRQ_LIB, not both" >&2; return 2; }
        command -v pkg-config >/dev/null || {
            echo "$name: FAIRQ_PKG_CONFIG=1 needs pkg-config (apt-get install -y pkg-config)" >&2
            return 1; }
        if ! pkg-config --exists fairq; then
            echo "$name: pkg-config finds no fairq (ffi/c/install.sh PREFIX --features fleet," \
                "then PKG_CONFIG_PATH=PREFIX/lib/pkgconfig)" >&2
            return 1
        fi
        # The module is this tree's source: the installed library must have every function it
        # calls (under one SONAME the C ABI only grows, so a newer one does).
        local want have
        want=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
        have=$(pkg-config --modversion fairq)
        if ! pkg-config --atleast-version="$want" fairq; then
            echo "$name: the installed fairq $have is older than this module's $want" >&2
            return 1
        fi
        local libdir cflags
        FAIRQ_INCLUDE=$(pkg-config --variable=includedir fairq)
        libdir=$(pkg-config --variable=libdir fairq)
        cflags=$(pkg-config --cflags fairq)
        # The static library, so that fairq's symbols stay private to the module (see config).
        FAIRQ_LIB=$libdir/libfairq.a
        if [ ! -f "$FAIRQ_LIB" ]; then
            echo "$name: no $FAIRQ_LIB (installed with --library-type cdylib?); the module links" \
                "the static library" >&2
            return 1
        fi
        if [ -z "${FAIRQ_FLEET:-}" ]; then
            case " $cflags " in
                *" -DFAIRQ_FLEET "*) FAIRQ_FLEET=1 ;;
                *) FAIRQ_FLEET=0 ;;
            esac
        fi
        echo "$name: the installed fairq $have from $libdir (fleet mode: $FAIRQ_FLEET)" >&2
    else
        FAIRQ_INCLUDE=$root/include
        FAIRQ_FLEET=${FAIRQ_FLEET:-1}
    fi
    case "$FAIRQ_FLEET" in 0|1) ;; *) echo "$name: FAIRQ_FLEET must be 0 or 1" >&2; return 2;; esac

    if [ -z "${FAIRQ_LIB:-}" ]; then
        local features=() dir target_dir
        dir=nginx-default
        if [ "$FAIRQ_FLEET" = 1 ]; then
            features=(--features fleet)
            dir=nginx-fleet
        fi
        target_dir=$(cd "$root" && cargo metadata --format-version 1 --no-deps \
            | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])') \
            || return 1
        (cd "$root" && cargo build --release -p fairq "${features[@]}" \
            --target-dir "$target_dir/$dir" --quiet) || return 1
        FAIRQ_LIB=$target_dir/$dir/release/libfairq.a
    fi
    [ -f "$FAIRQ_LIB" ] || { echo "$name: $FAIRQ_LIB not found" >&2; return 1; }
    # A module compiled with -DFAIRQ_FLEET against a library without fleet mode would fail to
    # load (undefined fairq_fleet_*): refuse it here.
    if [ "$FAIRQ_FLEET" = 1 ] && command -v nm >/dev/null \
        && ! nm -g --defined-only "$FAIRQ_LIB" 2>/dev/null | grep ' T fairq_fleet_new$' >/dev/null
    then
        echo "$name: $FAIRQ_LIB has no fleet API: build it with --features fleet, or set" \
            "FAIRQ_FLEET=0" >&2
        return 1
    fi
    export FAIRQ_INCLUDE FAIRQ_LIB FAIRQ_FLEET
}
