//! A datagram waiting in the send queue: its bytes, or its headers and
//! a gather list of registered memory (zero copy), until it is sent or
//! its region is deregistered (`materialize`).

use super::*;

/// A datagram waiting to be sent.
pub(super) struct Pending {
    pub(super) buf: Vec<u8>,
    pub(super) len: usize,
    pub(super) dst: SocketAddr,
    pub(super) tos: u8,
    pub(super) ttl: u8,
    /// Zero-copy: headers in `buf`, payload in registered memory, trailer
    /// (pad + ICRC) in `buf` after the headers.
    pub(super) gather: Option<Gather>,
    /// The gather sequence number to release once this datagram is sent or
    /// dropped (0: it never read registered memory).
    pub(super) seq: u64,
}

impl Pending {
    /// Appends the datagram's parts, in order, as I/O pieces.
    pub(super) fn pieces<'a>(&'a self, out: &mut Vec<IoPiece<'a>>) {
        let Some(g) = &self.gather else {
            out.push(IoPiece::new(&self.buf[..self.len]));
            return;
        };
        out.push(IoPiece::new(&self.buf[..g.header_len]));
        for p in g.pieces.iter().flatten() {
            match p.address() {
                // SAFETY: the region is registered: deregistration copies
                // the payload of queued datagrams out of it (`materialize`,
                // under the `tx` lock we hold) before it returns, so the
                // bytes stay valid while this datagram is queued. The kernel
                // only reads them, and no Rust reference to them exists.
                Some(a) => out.push(unsafe { IoPiece::from_raw(a, p.len) }),
                None => {
                    // Cannot happen (see above); the datagram then leaves
                    // short and the receiver drops it, as a damaged one.
                    debug_assert!(false, "a queued datagram reads a revoked region");
                    return;
                }
            }
        }
        if g.trailer_len > 0 {
            out.push(IoPiece::new(
                &self.buf[g.header_len..g.header_len + g.trailer_len],
            ));
        }
    }

    /// Whether the payload still sits in `region` (or any region, for
    /// `None`).
    pub(super) fn reads(&self, region: Option<&Arc<Region>>) -> bool {
        self.gather.as_ref().is_some_and(|g| {
            g.pieces
                .iter()
                .flatten()
                .any(|p| region.is_none_or(|r| Arc::ptr_eq(&p.region, r)))
        })
    }

    /// Writes the ICRC the core left to us (`Gather::icrc_left`: the
    /// same-host path's rings do not carry it), before the datagram
    /// leaves through UDP or has its payload copied out.
    pub(super) fn fill_icrc(&mut self) {
        if let Some(g) = self.gather.as_mut() {
            // (A revoked region leaves the ICRC 0: the receiver drops the
            // datagram as damaged. Cannot happen while it is queued: see
            // `pieces`.)
            let _ = g.fill_icrc(&mut self.buf);
        }
    }

    /// Copies the payload out of registered memory into `buf`, so the
    /// datagram no longer reads the program's memory.
    pub(super) fn materialize(&mut self) {
        self.fill_icrc();
        let Some(g) = self.gather.take() else {
            return;
        };
        let payload: usize = g.pieces.iter().flatten().map(|p| p.len).sum();
        let total = g.header_len + payload + g.trailer_len;
        if self.buf.len() < total {
            self.buf.resize(total, 0);
        }
        // Trailer to its place after the payload, then the payload.
        self.buf.copy_within(
            g.header_len..g.header_len + g.trailer_len,
            g.header_len + payload,
        );
        let mut at = g.header_len;
        for p in g.pieces.iter().flatten() {
            // A revoked region cannot be read: zeros make the receiver drop
            // the datagram (its ICRC no longer checks), as a damaged one.
            if p.read(&mut self.buf[at..at + p.len]).is_err() {
                self.buf[at..at + p.len].fill(0);
            }
            at += p.len;
        }
        self.len = total;
    }

    /// The datagram in one piece (for the capture file).
    pub(super) fn contiguous(&self) -> std::borrow::Cow<'_, [u8]> {
        let Some(g) = &self.gather else {
            return std::borrow::Cow::Borrowed(&self.buf[..self.len]);
        };
        let mut v = Vec::with_capacity(self.len);
        v.extend_from_slice(&self.buf[..g.header_len]);
        for p in g.pieces.iter().flatten() {
            let at = v.len();
            v.resize(at + p.len, 0);
            let _ = p.read(&mut v[at..]);
        }
        v.extend_from_slice(&self.buf[g.header_len..g.header_len + g.trailer_len]);
        std::borrow::Cow::Owned(v)
    }
}
