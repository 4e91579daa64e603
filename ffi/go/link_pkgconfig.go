//go:build !fairq_debug && !fairq_release && !fairq_fleet

package fairq

// By default the package builds against an installed fairq (ffi/c/install.sh PREFIX, or
// cargo cinstall): pkg-config supplies the include path and links libfairq.so, so the program
// needs libfairq.so.0 at run time (a system library directory, or LD_LIBRARY_PATH). Set
// PKG_CONFIG_PATH=PREFIX/lib/pkgconfig for a prefix pkg-config does not search. To link the
// repository's build tree instead, build with -tags fairq_debug or -tags fairq_release.

// #cgo pkg-config: fairq
import "C"
