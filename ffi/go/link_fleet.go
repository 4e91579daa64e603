//go:build fairq_fleet

package fairq

// -tags fairq_fleet: fleet mode (fleet.go, the fairq_fleet_* API) against the repository's
// release build with feature fleet, `cargo build --release -p fairq --features fleet`:
// ../../include/fairq.h with FAIRQ_FLEET defined and target/release/libfairq.a, linked
// statically. It takes precedence over the other link tags.

// #cgo CFLAGS: -I${SRCDIR}/../../include -DFAIRQ_FLEET
// #cgo LDFLAGS: ${SRCDIR}/../../target/release/libfairq.a -lpthread -ldl -lm
import "C"
