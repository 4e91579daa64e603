//go:build fairq_release && !fairq_fleet

package fairq

// -tags fairq_release: the repository's build tree, the release build (`cargo build --release
// -p fairq`): ../../include/fairq.h and target/release/libfairq.a, linked statically.

// #cgo CFLAGS: -I${SRCDIR}/../../include
// #cgo LDFLAGS: ${SRCDIR}/../../target/release/libfairq.a -lpthread -ldl -lm
import "C"
