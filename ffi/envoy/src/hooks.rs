//! The symbols Envoy looks up. Every hook catches panics: none unwinds into Envoy.

use std::ffi::{c_char, c_void};

use crate::abi::{self, ConfigEnvoy, EnvoyBuffer, FilterEnvoy};
use crate::filter::{boxed, guard, Filter, FilterConfig};

/// Called once when Envoy loads the module; returns the ABI version it was built against.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    abi::ABI_VERSION.as_ptr().cast()
}

/// A filter configuration: parsed and checked, or refused (null) with the reason in Envoy's log.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    envoy: ConfigEnvoy,
    _name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    guard(std::ptr::null(), || {
        // SAFETY: Envoy's buffer, valid for this call.
        let text = unsafe { config.bytes() };
        match FilterConfig::new(envoy, text) {
            Ok(c) => boxed(c),
            Err(e) => {
                abi::log(abi::LOG_ERROR, &format!("fairq: bad filter_config: {e}"));
                std::ptr::null()
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    guard((), || {
        // SAFETY: the pointer config_new returned, destroyed once by Envoy after its streams.
        drop(unsafe { Box::from_raw(config as *mut FilterConfig) });
    })
}

/// Per-route configuration is not used: every route shares the filter's.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_new(
    _name: EnvoyBuffer,
    _config: EnvoyBuffer,
) -> *const c_void {
    std::ptr::null()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_destroy(_c: *const c_void) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    _filter: FilterEnvoy,
) -> *const c_void {
    guard(std::ptr::null(), || boxed(Filter::new(config.cast())))
}

/// # Safety (for the hooks below)
/// `module` is the pointer `on_http_filter_new` returned, used on its stream's worker only.
fn stream<'a>(module: *const c_void) -> &'a mut Filter {
    // SAFETY: see above; Envoy never calls two hooks of one stream at once.
    unsafe { &mut *(module as *mut Filter) }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    filter: FilterEnvoy,
    module: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    guard(abi::HEADERS_CONTINUE, || {
        stream(module).on_request_headers(filter)
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    _f: FilterEnvoy,
    _m: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    abi::CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _f: FilterEnvoy,
    _m: *const c_void,
) -> u32 {
    abi::CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    filter: FilterEnvoy,
    module: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    guard(abi::CONTINUE, || stream(module).on_response_headers(filter))
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    _f: FilterEnvoy,
    _m: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    abi::CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    _f: FilterEnvoy,
    _m: *const c_void,
) -> u32 {
    abi::CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    _filter: FilterEnvoy,
    module: *const c_void,
) {
    guard((), || stream(module).finish())
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(module: *const c_void) {
    guard((), || {
        // A stream that never completed (reset early) still gives back what it holds.
        stream(module).finish();
        // SAFETY: the pointer on_http_filter_new returned; Envoy destroys it once.
        drop(unsafe { Box::from_raw(module as *mut Filter) });
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    filter: FilterEnvoy,
    module: *const c_void,
    _event_id: u64,
) {
    guard((), || stream(module).on_scheduled(filter))
}

// Hooks every HTTP-filter module exports; this filter starts no callouts and is not terminal.

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    _f: FilterEnvoy,
    _m: *const c_void,
    _id: u64,
    _result: u32,
    _headers: *const c_void,
    _headers_size: usize,
    _body: *const c_void,
    _body_size: usize,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers(
    _f: FilterEnvoy,
    _m: *const c_void,
    _id: u64,
    _headers: *const c_void,
    _headers_size: usize,
    _end_stream: bool,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data(
    _f: FilterEnvoy,
    _m: *const c_void,
    _id: u64,
    _data: *const c_void,
    _data_count: usize,
    _end_stream: bool,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers(
    _f: FilterEnvoy,
    _m: *const c_void,
    _id: u64,
    _trailers: *const c_void,
    _trailers_size: usize,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete(
    _f: FilterEnvoy,
    _m: *const c_void,
    _id: u64,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset(
    _f: FilterEnvoy,
    _m: *const c_void,
    _id: u64,
    _reason: u32,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(
    _f: FilterEnvoy,
    _m: *const c_void,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(
    _f: FilterEnvoy,
    _m: *const c_void,
) {
}
