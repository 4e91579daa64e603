//! The part of Envoy's dynamic-modules C ABI (`abi.h`, ABI "v0.2.0", Envoy 1.40) this filter
//! calls, declared by hand: the official SDK is not on crates.io. The hooks Envoy calls are in
//! `lib.rs`; the ones every HTTP-filter module must export but this filter does not use are
//! no-ops there.
//!
//! Pointers named `*_envoy` are Envoy's objects, valid for the hook that received them; a buffer
//! the module passes in is read during the call only.

use std::ffi::c_void;

/// The ABI version this module is built against; Envoy logs a warning on a mismatch.
pub const ABI_VERSION: &[u8] = b"v0.2.0\0";

/// A view of bytes Envoy owns.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyBuffer {
    pub ptr: *const u8,
    pub length: usize,
}

impl EnvoyBuffer {
    pub const EMPTY: EnvoyBuffer = EnvoyBuffer {
        ptr: std::ptr::null(),
        length: 0,
    };

    /// # Safety
    /// `ptr` must be valid for `length` bytes for the returned lifetime (Envoy guarantees it until
    /// the hook returns).
    pub unsafe fn bytes<'a>(self) -> &'a [u8] {
        if self.ptr.is_null() || self.length == 0 {
            &[]
        } else {
            // SAFETY: non-null and `length` readable bytes, by the caller's contract.
            unsafe { std::slice::from_raw_parts(self.ptr, self.length) }
        }
    }
}

/// A view of bytes the module owns, read by Envoy during the call.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleBuffer {
    pub ptr: *const u8,
    pub length: usize,
}

impl ModuleBuffer {
    pub fn of(bytes: &[u8]) -> ModuleBuffer {
        ModuleBuffer {
            ptr: bytes.as_ptr(),
            length: bytes.len(),
        }
    }
}

/// A header the module hands to Envoy.
#[repr(C)]
pub struct ModuleHeader {
    pub key_ptr: *const u8,
    pub key_length: usize,
    pub value_ptr: *const u8,
    pub value_length: usize,
}

impl ModuleHeader {
    pub fn new(key: &[u8], value: &[u8]) -> ModuleHeader {
        ModuleHeader {
            key_ptr: key.as_ptr(),
            key_length: key.len(),
            value_ptr: value.as_ptr(),
            value_length: value.len(),
        }
    }
}

pub type ConfigEnvoy = *mut c_void;
pub type FilterEnvoy = *mut c_void;
pub type Scheduler = *mut c_void;

/// `envoy_dynamic_module_type_http_header_type`.
pub const REQUEST_HEADER: u32 = 0;
pub const RESPONSE_HEADER: u32 = 2;

/// `..._on_http_filter_request_headers_status`: Continue, and StopAllIterationAndWatermark (hold
/// the headers and buffer the body under flow control until continue_decoding).
pub const HEADERS_CONTINUE: u32 = 0;
pub const HEADERS_STOP_ITERATION: u32 = 1;
pub const HEADERS_STOP_ALL_AND_WATERMARK: u32 = 4;
/// The body, trailers and response statuses: 0 is Continue in each.
pub const CONTINUE: u32 = 0;

/// `envoy_dynamic_module_type_metrics_result_Success`.
pub const METRICS_SUCCESS: u32 = 0;

/// `envoy_dynamic_module_type_log_level`.
pub const LOG_ERROR: u32 = 4;

extern "C" {
    pub fn envoy_dynamic_module_callback_log(level: u32, message: ModuleBuffer);

    pub fn envoy_dynamic_module_callback_http_get_header(
        filter: FilterEnvoy,
        header_type: u32,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
        index: usize,
        optional_size: *mut usize,
    ) -> bool;

    pub fn envoy_dynamic_module_callback_http_set_header(
        filter: FilterEnvoy,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;

    pub fn envoy_dynamic_module_callback_http_send_response(
        filter: FilterEnvoy,
        status_code: u32,
        headers: *const ModuleHeader,
        headers_len: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    );

    pub fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: FilterEnvoy);

    pub fn envoy_dynamic_module_callback_http_get_cluster_name(
        filter: FilterEnvoy,
        result: *mut EnvoyBuffer,
    ) -> bool;

    /// Thread: the filter's worker. The scheduler must be deleted once, by the module.
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_new(
        filter: FilterEnvoy,
    ) -> Scheduler;
    /// Any thread; a no-op once the filter is destroyed. Runs `on_http_filter_scheduled` on the
    /// filter's worker.
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_commit(
        scheduler: Scheduler,
        event_id: u64,
    );
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_delete(scheduler: Scheduler);

    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: ConfigEnvoy,
        name: ModuleBuffer,
        label_names: *const ModuleBuffer,
        label_names_len: usize,
        id_out: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_gauge(
        config: ConfigEnvoy,
        name: ModuleBuffer,
        label_names: *const ModuleBuffer,
        label_names_len: usize,
        id_out: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_histogram(
        config: ConfigEnvoy,
        name: ModuleBuffer,
        label_names: *const ModuleBuffer,
        label_names_len: usize,
        id_out: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: ConfigEnvoy,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_set_gauge(
        config: ConfigEnvoy,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_record_histogram_value(
        config: ConfigEnvoy,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
}

/// Logs through Envoy's `dynamic_modules` logger.
pub fn log(level: u32, message: &str) {
    // SAFETY: the buffer is valid for the call; Envoy copies it.
    unsafe { envoy_dynamic_module_callback_log(level, ModuleBuffer::of(message.as_bytes())) }
}
