//go:build !fairq_release

package fairq

// Links the debug build (`cargo build`). Build with `-tags fairq_release` to link
// target/release/libfairq.a instead.

// #cgo LDFLAGS: ${SRCDIR}/../../target/debug/libfairq.a -lpthread -ldl -lm
import "C"
