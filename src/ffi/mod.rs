//! The C ABI: the `extern "C"` functions, `#[repr(C)]` types and stable codes that C, Python
//! (ctypes), Go (cgo) and NGINX/Envoy modules link against. `include/fairq.h` is generated from
//! these files by `build.rs` (cbindgen) and committed.
//!
//! The conventions every function follows (status, ownership, pointers and handles, error
//! precedence, out-parameters, panics, threads, time) are stated in `docs/c-api.md`; the
//! header's preamble (`cbindgen.toml`) sums them up for C readers. In the code:
//! `boundary.rs` holds the panic boundary and the pointer checks, `api.rs`'s module doc the order
//! of the checks, and `tests/ffi_pointers.rs` tries every pointer of every export NULL and
//! misaligned.
//!
//! Every function is written by hand (cbindgen does not expand macros); the panic boundary is a
//! macro used *inside* each one.

#![allow(non_camel_case_types)]
#![deny(unsafe_op_in_unsafe_fn)]

#[macro_use]
mod boundary;
mod api;
mod codes;
// Feature `fleet`: cbindgen follows this cfg-gated `mod` too and wraps what it finds in
// `#if defined(FAIRQ_FLEET)` (cbindgen.toml `[defines]`), so the header is the same either way.
#[cfg(feature = "fleet")]
mod fleet;
mod indicators;
mod status;
mod types;
// After the modules above, so the header lists the controls after what they build on.
mod controls;

pub use api::*;
pub use codes::*;
pub use controls::*;
#[cfg(feature = "fleet")]
pub use fleet::*;
pub use indicators::*;
pub use status::*;
pub use types::*;
