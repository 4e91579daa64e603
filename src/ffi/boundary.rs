//! What every exported function does at the border: catch panics, check pointers, map errors.
//!
//! After `rustls-ffi`'s `panic.rs`: the boundary is a macro used inside each hand-written
//! function, so cbindgen still sees a plain `extern "C" fn`.

use std::os::raw::c_char;

use super::codes::*;
use crate::types::Error;

/// Runs `$body` (a block that evaluates to `Result<i32, i32>`, so `?` returns an error status)
/// and catches any panic, which becomes `FAIRQ_ERR_PANIC`. Ok and Err both carry the status.
macro_rules! ffi_status {
    ($body:block) => {{
        let run = || -> Result<i32, i32> { $body };
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(run)) {
            Ok(Ok(status)) | Ok(Err(status)) => status,
            Err(_) => $crate::ffi::FAIRQ_ERR_PANIC,
        }
    }};
}

/// Runs `$body` (any value) and returns `$on_panic` if it panics.
macro_rules! ffi_value {
    ($on_panic:expr, $body:block) => {{
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| $body)) {
            Ok(value) => value,
            Err(_) => $on_panic,
        }
    }};
}

/// The status for an engine error. Nothing changed in the engine.
pub(crate) fn error_status(error: Error) -> i32 {
    match error {
        Error::StaleTicket => FAIRQ_ERR_STALE_TICKET,
        Error::TicketState => FAIRQ_ERR_TICKET_STATE,
        Error::InvalidArgument(_) => FAIRQ_ERR_INVALID_ARGUMENT,
        Error::TooManyWeightClasses => FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES,
    }
}

/// Checks a pointer the caller must provide: not NULL, aligned for `T`.
pub(crate) fn required<T>(ptr: *const T) -> Result<*const T, i32> {
    if ptr.is_null() {
        return Err(FAIRQ_ERR_NULL);
    }
    if (ptr as usize) % std::mem::align_of::<T>() != 0 {
        return Err(FAIRQ_ERR_INVALID_ARGUMENT);
    }
    Ok(ptr)
}

/// Checks an out-pointer the caller must provide: not NULL, aligned for `T`.
pub(crate) fn required_out<T>(ptr: *mut T) -> Result<*mut T, i32> {
    required(ptr.cast_const()).map(|p| p.cast_mut())
}

/// Checks an optional out-pointer: NULL means "not wanted"; a non-NULL one must be aligned.
pub(crate) fn optional_out<T>(ptr: *mut T) -> Result<Option<*mut T>, i32> {
    if ptr.is_null() {
        return Ok(None);
    }
    required_out(ptr).map(Some)
}

/// Writes `value` through an out-pointer checked by [`required_out`] or [`optional_out`].
///
/// # Safety
/// `ptr` must be valid for a write of `T` (the caller's contract for every out-parameter).
pub(crate) unsafe fn write_out<T>(ptr: *mut T, value: T) {
    // SAFETY: non-NULL and aligned (checked by `required_out`/`optional_out`), and valid for a
    // write by the caller's contract. `write` does not read or drop the old, maybe
    // uninitialised, value.
    unsafe { ptr.write(value) }
}

/// A caller's array (pointer and element count) whose pointer passed its check; its count is a
/// value, checked when it is borrowed ([`Array::get`]). Splitting the two keeps the error
/// precedence: every pointer of a call is checked before any value.
#[derive(Clone, Copy)]
pub(crate) struct Array<T> {
    ptr: *const T,
    count: usize,
}

/// Checks an array argument: NULL is allowed only with `count == 0` (else `FAIRQ_ERR_NULL`); a
/// non-NULL pointer must be aligned for `T` whatever the count (else
/// `FAIRQ_ERR_INVALID_ARGUMENT`).
pub(crate) fn array<T>(ptr: *const T, count: usize) -> Result<Array<T>, i32> {
    if ptr.is_null() {
        return if count == 0 {
            Ok(Array { ptr, count })
        } else {
            Err(FAIRQ_ERR_NULL)
        };
    }
    required(ptr).map(|ptr| Array { ptr, count })
}

/// A byte string argument (`len` bytes at `ptr`, not NUL-terminated): [`array`] of bytes.
pub(crate) fn bytes(ptr: *const c_char, len: usize) -> Result<Array<u8>, i32> {
    array(ptr.cast::<u8>(), len)
}

impl<T> Array<T> {
    /// Borrows the elements. `FAIRQ_ERR_INVALID_ARGUMENT` when `count` elements cannot be one
    /// object (more than `isize::MAX` bytes).
    ///
    /// # Safety
    /// A non-NULL pointer must be valid for reads of `count` initialised elements, not written
    /// while the slice lives (the call's duration).
    pub(crate) unsafe fn get<'a>(self) -> Result<&'a [T], i32> {
        if self.ptr.is_null() {
            return Ok(&[]);
        }
        let size = std::mem::size_of::<T>().max(1);
        if self.count > isize::MAX as usize / size {
            return Err(FAIRQ_ERR_INVALID_ARGUMENT);
        }
        // SAFETY: non-NULL and aligned (checked by `array`), the byte size fits `isize`
        // (checked above), and `count` initialised elements are readable and not written for
        // `'a` by the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr, self.count) })
    }
}

/// Checks a caller's output buffer of `len` bytes: NULL is allowed only with `len == 0`.
/// (Bytes need no alignment.)
pub(crate) fn out_buffer(ptr: *mut c_char, len: usize) -> Result<*mut c_char, i32> {
    if ptr.is_null() && len > 0 {
        return Err(FAIRQ_ERR_NULL);
    }
    Ok(ptr)
}

/// Copies `text` into a caller buffer of `len` bytes, truncated, always NUL-terminated when
/// `len > 0`. NULL `buf` or `len == 0` writes nothing.
///
/// # Safety
/// A non-NULL `buf` must be valid for writes of `len` bytes.
pub(crate) unsafe fn copy_message(text: &str, buf: *mut c_char, len: usize) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = text.len().min(len - 1);
    // SAFETY: `buf` is non-NULL and valid for `len` bytes (caller's contract); we write `n + 1
    // <= len` bytes. `text` is a Rust string, so the regions cannot overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
}

/// Hands a rendered text to a caller's buffer, as every text export does: `*needed` (if asked
/// for) gets its size with the NUL; `FAIRQ_ERR_BUFFER_TOO_SMALL` when `buf` cannot hold that
/// (nothing is written to it), else the text is copied, NUL-terminated.
///
/// # Safety
/// A non-NULL `buf` must be valid for writes of `len` bytes; `needed`, if given, checked by
/// [`optional_out`] and writable.
pub(crate) unsafe fn hand_over_text(
    text: &str,
    buf: *mut c_char,
    len: usize,
    needed: Option<*mut usize>,
) -> Result<i32, i32> {
    let size = text.len() + 1;
    if let Some(needed) = needed {
        // SAFETY: checked non-NULL and aligned, writable by the caller's contract.
        unsafe { write_out(needed, size) };
    }
    if buf.is_null() || len < size {
        return Err(FAIRQ_ERR_BUFFER_TOO_SMALL);
    }
    // SAFETY: `buf` is non-NULL and valid for `len >= size` bytes, so the whole text and its NUL
    // fit.
    unsafe { copy_message(text, buf, len) };
    Ok(FAIRQ_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_panic_status() {
        let status = ffi_status!({
            if std::hint::black_box(true) {
                panic!("boom");
            }
            Ok(FAIRQ_OK)
        });
        assert_eq!(status, FAIRQ_ERR_PANIC);
        let value = ffi_value!(7u64, {
            if std::hint::black_box(true) {
                panic!("boom");
            }
            1u64
        });
        assert_eq!(value, 7);
    }

    #[test]
    fn errors_pass_through_the_boundary() {
        let status = ffi_status!({
            let p = required(std::ptr::null::<u64>())?;
            let _ = p;
            Ok(FAIRQ_OK)
        });
        assert_eq!(status, FAIRQ_ERR_NULL);
        let misaligned = std::ptr::dangling::<u64>()
            .cast::<u8>()
            .wrapping_add(1)
            .cast::<u64>();
        assert_eq!(required(misaligned), Err(FAIRQ_ERR_INVALID_ARGUMENT));
    }

    #[test]
    fn messages_are_truncated_and_terminated() {
        let mut buf = [0x55 as c_char; 6];
        // SAFETY: `buf` is a live 6-byte array.
        unsafe { copy_message("config error", buf.as_mut_ptr(), buf.len()) };
        let got: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
        assert_eq!(&got, b"confi\0");
    }
}
