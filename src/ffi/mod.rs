//! The C ABI: the `extern "C"` functions, `#[repr(C)]` types and stable codes that C, Python
//! (ctypes), Go (cgo) and NGINX/Envoy modules link against. `include/fairq.h` is generated from
//! these files by `build.rs` (cbindgen) and committed.
//!
//! # Conventions (the README's "API conventions" restates them for C users)
//! - **Status.** Every function returns an `int32_t` status, except the string functions,
//!   `fairq_now_ns`, `fairq_config_default`, `fairq_engine_free`, `fairq_engine_builder_free`,
//!   and (feature `fleet`) `fairq_fleet_config_default` and `fairq_fleet_free`. `FAIRQ_OK` is 0, errors are
//!   negative, other outcomes (`FAIRQ_QUEUED`, `FAIRQ_EMPTY`, ...) are positive. The numbers never
//!   change meaning.
//! - **Pointers.** Every pointer is checked by the helpers of `boundary.rs`, before anything
//!   happens: NULL where a value is required gives `FAIRQ_ERR_NULL`, a misaligned pointer
//!   `FAIRQ_ERR_INVALID_ARGUMENT` (the engine handle: `FAIRQ_ERR_INVALID_HANDLE`).
//!   `fairq_engine_free(NULL)` is a no-op. `tests/ffi_pointers.rs` tries every pointer of every
//!   export NULL and misaligned.
//! - **Precedence.** The engine handle, then the other pointers in argument order, then values,
//!   then the engine's own answer (`api.rs` spells it out).
//! - **Out-parameters** are written only when the status says they were (`FAIRQ_OK` and the
//!   positive outcomes documented per function); on an error they are left untouched.
//! - **Panics** never cross the boundary: each function catches them and returns
//!   `FAIRQ_ERR_PANIC` (or a fixed string, or nothing).
//! - **Threads.** A `fairq_engine` is `Send + Sync`: every call may run concurrently from any
//!   thread, except `fairq_engine_free`, which must be the last call on that engine.
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
mod types;
// After the modules above, so the header lists the controls after what they build on.
mod controls;

pub use api::*;
pub use codes::*;
pub use controls::*;
#[cfg(feature = "fleet")]
pub use fleet::*;
pub use indicators::*;
pub use types::*;
