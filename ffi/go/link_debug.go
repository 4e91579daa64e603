//go:build fairq_debug && !fairq_release && !fairq_fleet

package fairq

// -tags fairq_debug: the repository's build tree, the debug build (`cargo build -p fairq`):
// ../../include/fairq.h and target/debug/libfairq.a, linked statically.

// #cgo CFLAGS: -I${SRCDIR}/../../include
// #cgo LDFLAGS: ${SRCDIR}/../../target/debug/libfairq.a -lpthread -ldl -lm
import "C"
