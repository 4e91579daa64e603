//! The responses the layer writes: refusals (429), the metrics, and the headers of an admitted
//! request.

use std::time::Duration;

use fairq::{Engine, Refusal, TenantDimension};
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};

use crate::{Admission, FairBody};

/// `x-fair-queue-position`: the 1-based place in the tenant's queue (had, or would have had).
pub const POSITION: HeaderName = HeaderName::from_static("x-fair-queue-position");
/// `x-fair-queue-wait-ms`: how long the request waited.
pub const WAIT_MS: HeaderName = HeaderName::from_static("x-fair-queue-wait-ms");
/// `x-fair-queue-estimated-wait-ms`: the wait estimated when it was queued.
pub const ESTIMATED_WAIT_MS: HeaderName = HeaderName::from_static("x-fair-queue-estimated-wait-ms");

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The headers of a response to a request that went through the queue.
pub(crate) fn granted_headers(headers: &mut HeaderMap, admission: &Admission) {
    headers.insert(POSITION, HeaderValue::from(admission.position));
    headers.insert(WAIT_MS, HeaderValue::from(millis(admission.waited)));
    headers.insert(
        ESTIMATED_WAIT_MS,
        HeaderValue::from(millis(admission.estimated_wait)),
    );
}

/// 429 with `Retry-After` (whole seconds, at least 1: the longer of the limiter's hint and the
/// wait already spent; none when a retry cannot help, `Reason::retry_can_help`), the position
/// and wait headers, and the JSON error body.
pub(crate) fn refusal<B>(
    refusal: Refusal,
    tenant_dimension: TenantDimension,
    limiter_retry_after: Duration,
) -> Response<FairBody<B>> {
    let wait_ms = refusal.waited_ns / 1_000_000;
    let hint = limiter_retry_after.max(Duration::from_nanos(refusal.waited_ns));
    let retry_s = hint.as_secs() + u64::from(hint.subsec_nanos() > 0);
    let reason = refusal.reason.as_str();
    let body = format!(
        "{{\"error\": {{\"type\": \"rate_limited\", \"message\": \"fair queue refused the \
         request: {reason}\", \"details\": {{\"fair_queue\": {{\"tenant_dimension\": \"{}\", \
         \"reason\": \"{reason}\", \"position\": {}, \"wait_ms\": {wait_ms}}}}}}}}}\n",
        tenant_dimension.as_str(),
        refusal.position,
    );
    let mut response = Response::new(FairBody::local(body));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if refusal.reason.retry_can_help() {
        headers.insert(RETRY_AFTER, HeaderValue::from(retry_s.max(1)));
    }
    headers.insert(POSITION, HeaderValue::from(refusal.position));
    headers.insert(WAIT_MS, HeaderValue::from(wait_ms));
    response
}

/// The engine's Prometheus text.
pub(crate) fn metrics<B>(engine: &Engine) -> Response<FairBody<B>> {
    let mut response = Response::new(FairBody::local(engine.prometheus_text()));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// 500 for a failure of the queue itself (never expected: the layer's own arguments are valid).
pub(crate) fn internal_error<B>(message: &str) -> Response<FairBody<B>> {
    let mut response = Response::new(FairBody::local(format!(
        "{{\"error\": {{\"type\": \"internal\", \"message\": \"{}\"}}}}\n",
        message.replace(['"', '\\'], "'")
    )));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
