//! Completions as an async stream (feature `tokio`).

use crate::error::{Error, Result};
use crate::verbs::{CompletionQueue, EMPTY_WC};
use softrdma_proto::Wc;
use std::os::fd::{AsRawFd, RawFd};
use tokio::io::unix::AsyncFd;

/// The channel's eventfd, kept open by holding the channel.
struct Fd(std::sync::Arc<crate::event::ChannelShared>);
impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd.as_raw_fd()
    }
}

/// Completions of a CQ with a completion channel, awaited with tokio.
pub struct WcStream {
    cq: CompletionQueue,
    fd: AsyncFd<Fd>,
    buf: Vec<Wc>,
}

impl WcStream {
    pub(crate) fn new(cq: CompletionQueue) -> Result<WcStream> {
        let ch = cq
            .channel()
            .ok_or_else(|| Error::InvalidArgument("the CQ has no completion channel".into()))?;
        // SAFETY: `Fd` owns a reference to the channel, so its eventfd stays
        // open and the same for as long as the `AsyncFd` lives.
        let fd = unsafe { AsyncFd::register(Fd(ch.inner.clone())) }
            .map_err(|e| Error::io("registering with tokio", e.into_parts().1))?;
        Ok(WcStream {
            cq,
            fd,
            buf: Vec::new(),
        })
    }

    /// The next completion.
    pub async fn next(&mut self) -> Result<Wc> {
        loop {
            if let Some(wc) = self.buf.pop() {
                return Ok(wc);
            }
            let mut b = [EMPTY_WC; 32];
            let n = self.cq.poll(&mut b)?;
            if n > 0 {
                self.buf.extend(b[..n].iter().rev());
                continue;
            }
            // Arm, then check again so a completion between the poll and the
            // arm is not missed.
            self.cq.req_notify(false)?;
            let n = self.cq.poll(&mut b)?;
            if n > 0 {
                self.buf.extend(b[..n].iter().rev());
                continue;
            }
            let mut g = self
                .fd
                .readable()
                .await
                .map_err(|e| Error::io("awaiting completions", e))?;
            if let Some(ch) = self.cq.channel() {
                while ch.try_get_event().is_some() {}
            }
            g.clear_ready();
        }
    }
}
