//! The response body: the inner service's body, holding the request's permit until it ends, or a
//! body the layer wrote itself (a refusal, the metrics).

use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::dispatch::Permit;

pin_project! {
    /// The body of every response [`FairQueue`](crate::FairQueue) returns. For an admitted
    /// request it is the inner service's body, and the request's permit goes back when that body
    /// ends (its last frame, an error, or the body dropped), not when the headers are sent.
    pub struct FairBody<B> {
        #[pin]
        kind: Kind<B>,
        permit: Option<Permit>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Local { data: Option<Bytes> },
    }
}

impl<B> FairBody<B> {
    /// The inner service's body, nothing held.
    pub(crate) fn passed(body: B) -> Self {
        FairBody {
            kind: Kind::Inner { body },
            permit: None,
        }
    }

    /// The inner service's body; `permit` goes back when it ends.
    pub(crate) fn held(body: B, permit: Permit) -> Self {
        FairBody {
            kind: Kind::Inner { body },
            permit: Some(permit),
        }
    }

    /// A body written by the layer.
    pub(crate) fn local(data: impl Into<Bytes>) -> Self {
        let data: Bytes = data.into();
        FairBody {
            kind: Kind::Local {
                data: (!data.is_empty()).then_some(data),
            },
            permit: None,
        }
    }
}

impl<B: Body<Data = Bytes>> Body for FairBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        match this.kind.project() {
            KindProj::Inner { mut body } => {
                let frame = ready!(body.as_mut().poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) || body.is_end_stream() {
                    // The end (or an error): the permit goes back now.
                    this.permit.take();
                }
                Poll::Ready(frame)
            }
            KindProj::Local { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Local { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Local { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

impl<B> fmt::Debug for FairBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairBody")
            .field("holds_permit", &self.permit.is_some())
            .finish_non_exhaustive()
    }
}
