//go:build fairq_release

package fairq

// Links the release build (`cargo build --release`).

// #cgo LDFLAGS: ${SRCDIR}/../../target/release/libfairq.a -lpthread -ldl -lm
import "C"
