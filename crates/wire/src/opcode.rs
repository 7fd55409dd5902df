//! The BTH opcode table, as data.
//!
//! IBA 9.2.1 (table 38) splits the 8-bit opcode in a 3-bit transport prefix
//! (RC 000, UC 001, RD 010, UD 011, CNP 100, XRC 101) and a 5-bit operation. One table
//! entry per opcode says which extension headers follow the BTH, whether the
//! packet is a first/middle/last/only piece of a message, whether it carries
//! payload and what kind of packet it is. Header offsets are computed from it;
//! nothing else in the crate types an offset by hand.

use core::fmt;

/// A BTH opcode (known or not).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

/// Transport service of an opcode (its top three bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Reliable datagram (not carried by RoCE v2 stacks; table entries absent).
    Rd,
    /// Unreliable datagram.
    Ud,
    /// RoCE v2 congestion notification packet (opcode 0x81, Annex A17.9.2).
    Cnp,
    /// Extended reliable connected (IBA 9.2 table 38 prefix 101, IBA
    /// 9.3.7 / 9.4: every request carries an XRCETH naming the XRC SRQ at
    /// the target; responses are RC's).
    Xrc,
}

/// Which piece of a message a packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Middle packet of a multi-packet message.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The only packet of a message.
    Only,
}

impl Position {
    /// The position of a packet that does or does not start and end its
    /// message.
    #[inline]
    pub const fn of(first: bool, last: bool) -> Position {
        match (first, last) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        }
    }
    /// True for First and Only: the packet starts a message.
    pub const fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// True for Last and Only: the packet ends a message.
    pub const fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// The operation an opcode belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (any variant: plain, with immediate, with invalidate).
    Send,
    /// RDMA WRITE (plain or with immediate).
    RdmaWrite,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// ACKNOWLEDGE (ACK or NAK, AETH only).
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE (AETH + AtomicAckETH).
    AtomicAcknowledge,
    /// ATOMIC CompareSwap request.
    CompareSwap,
    /// ATOMIC FetchAdd request.
    FetchAdd,
    /// FLUSH request (IBA 1.5, annex A19): FETH + RETH, no payload.
    Flush,
    /// ATOMIC WRITE request (IBA 1.5, annex A19): RETH + 8 bytes.
    AtomicWrite,
    /// Congestion notification packet.
    Cnp,
}

impl Operation {
    /// True for operations a requester sends (as opposed to responses).
    pub const fn is_request(self) -> bool {
        matches!(
            self,
            Operation::Send
                | Operation::RdmaWrite
                | Operation::ReadRequest
                | Operation::CompareSwap
                | Operation::FetchAdd
                | Operation::Flush
                | Operation::AtomicWrite
        )
    }
    /// True for atomic requests.
    pub const fn is_atomic(self) -> bool {
        matches!(self, Operation::CompareSwap | Operation::FetchAdd)
    }
}

/// A set of extension headers (bit flags).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u16);

impl Headers {
    /// No extension header.
    pub const NONE: Headers = Headers(0);
    /// Datagram ETH (8 bytes): Q_Key, source QP. UD.
    pub const DETH: Headers = Headers(1 << 0);
    /// RDMA ETH (16 bytes): VA, R_Key, DMA length.
    pub const RETH: Headers = Headers(1 << 1);
    /// Atomic ETH (28 bytes): VA, R_Key, swap/add, compare.
    pub const ATOMIC_ETH: Headers = Headers(1 << 2);
    /// ACK ETH (4 bytes): syndrome, MSN.
    pub const AETH: Headers = Headers(1 << 3);
    /// Atomic ACK ETH (8 bytes): original remote data.
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 4);
    /// Immediate data (4 bytes).
    pub const IMM: Headers = Headers(1 << 5);
    /// Invalidate ETH (4 bytes): the R_Key to invalidate.
    pub const IETH: Headers = Headers(1 << 6);
    /// The 16 reserved bytes after the BTH of a CNP.
    pub const CNP_PAD: Headers = Headers(1 << 7);
    /// FLUSH ETH (4 bytes): placement type, selectivity level. Before the
    /// RETH of a FLUSH (IBA 1.5, annex A19).
    pub const FETH: Headers = Headers(1 << 8);
    /// XRC ETH (4 bytes): the XRC SRQ number at the target (IBA 9.3.7);
    /// right after the BTH (and where there is one, after the DETH: IBA
    /// 9.2's header order RDETH, DETH, XRCETH, then RETH/AtomicETH…).
    pub const XRCETH: Headers = Headers(1 << 9);

    /// Every header in wire order with its length, the order they follow the BTH.
    pub const ORDER: [(Headers, usize); 10] = [
        (Headers::DETH, 8),
        (Headers::XRCETH, 4),
        (Headers::FETH, 4),
        (Headers::RETH, 16),
        (Headers::ATOMIC_ETH, 28),
        (Headers::AETH, 4),
        (Headers::ATOMIC_ACK_ETH, 8),
        (Headers::IMM, 4),
        (Headers::IETH, 4),
        (Headers::CNP_PAD, 16),
    ];

    /// Union of two sets.
    pub const fn with(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }
    /// True when every header of `other` is in `self`.
    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }
    /// Total length of the headers in the set.
    pub const fn len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if self.contains(Self::ORDER[i].0) {
                n += Self::ORDER[i].1;
            }
            i += 1;
        }
        n
    }
    /// True for the empty set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Offset of `which` from the end of the BTH, if it is in the set.
    pub const fn offset_of(self, which: Headers) -> Option<usize> {
        if !self.contains(which) {
            return None;
        }
        let mut n = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if Self::ORDER[i].0 .0 == which.0 {
                return Some(n);
            }
            if self.contains(Self::ORDER[i].0) {
                n += Self::ORDER[i].1;
            }
            i += 1;
        }
        None
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 10] = [
            "DETH",
            "XRCETH",
            "FETH",
            "RETH",
            "AtomicETH",
            "AETH",
            "AtomicAckETH",
            "ImmDt",
            "IETH",
            "CNP",
        ];
        let mut first = true;
        f.write_str("{")?;
        for (i, (h, _)) in Self::ORDER.iter().enumerate() {
            if self.contains(*h) {
                if !first {
                    f.write_str("|")?;
                }
                first = false;
                f.write_str(NAMES[i])?;
            }
        }
        f.write_str("}")
    }
}

/// Everything the table says about one opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Name as Wireshark and rxe spell it, e.g. `RC_SEND_ONLY`.
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub operation: Operation,
    /// First / middle / last / only.
    pub position: Position,
    /// Extension headers that follow the BTH.
    pub headers: Headers,
    /// Whether a payload may follow the headers.
    pub payload: bool,
}

impl OpcodeInfo {
    /// Carries immediate data.
    pub const fn immediate(&self) -> bool {
        self.headers.contains(Headers::IMM)
    }
    /// Carries an invalidate R_Key.
    pub const fn invalidate(&self) -> bool {
        self.headers.contains(Headers::IETH)
    }
    /// A request (SEND, WRITE, READ request, atomic).
    pub const fn is_request(&self) -> bool {
        self.operation.is_request()
    }
    /// A response (read response, ACK, atomic ACK) — what a responder sends.
    pub const fn is_response(&self) -> bool {
        matches!(
            self.operation,
            Operation::ReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }
    /// Carries an AETH: an acknowledgement (ACK/NAK, atomic ACK, some read responses).
    pub const fn is_ack(&self) -> bool {
        self.headers.contains(Headers::AETH)
    }
    /// Length of the extension headers.
    pub const fn ext_len(&self) -> usize {
        self.headers.len()
    }
}

const fn e(
    name: &'static str,
    transport: Transport,
    operation: Operation,
    position: Position,
    headers: Headers,
    payload: bool,
) -> Option<OpcodeInfo> {
    Some(OpcodeInfo {
        name,
        transport,
        operation,
        position,
        headers,
        payload,
    })
}

use Operation as O;
use Position as P;
use Transport as T;

const N: Headers = Headers::NONE;
const RETH: Headers = Headers::RETH;
const IMM: Headers = Headers::IMM;
const AETH: Headers = Headers::AETH;
const RETH_IMM: Headers = Headers::RETH.with(Headers::IMM);
const AETH_ACK: Headers = Headers::AETH.with(Headers::ATOMIC_ACK_ETH);
const DETH: Headers = Headers::DETH;
const DETH_IMM: Headers = Headers::DETH.with(Headers::IMM);

const TABLE_DATA: [Option<OpcodeInfo>; 256] = {
    let mut t: [Option<OpcodeInfo>; 256] = [None; 256];
    // Reliable connected (IBA table 38, prefix 000).
    t[0x00] = e("RC_SEND_FIRST", T::Rc, O::Send, P::First, N, true);
    t[0x01] = e("RC_SEND_MIDDLE", T::Rc, O::Send, P::Middle, N, true);
    t[0x02] = e("RC_SEND_LAST", T::Rc, O::Send, P::Last, N, true);
    t[0x03] = e(
        "RC_SEND_LAST_WITH_IMMEDIATE",
        T::Rc,
        O::Send,
        P::Last,
        IMM,
        true,
    );
    t[0x04] = e("RC_SEND_ONLY", T::Rc, O::Send, P::Only, N, true);
    t[0x05] = e(
        "RC_SEND_ONLY_WITH_IMMEDIATE",
        T::Rc,
        O::Send,
        P::Only,
        IMM,
        true,
    );
    t[0x06] = e(
        "RC_RDMA_WRITE_FIRST",
        T::Rc,
        O::RdmaWrite,
        P::First,
        RETH,
        true,
    );
    t[0x07] = e(
        "RC_RDMA_WRITE_MIDDLE",
        T::Rc,
        O::RdmaWrite,
        P::Middle,
        N,
        true,
    );
    t[0x08] = e("RC_RDMA_WRITE_LAST", T::Rc, O::RdmaWrite, P::Last, N, true);
    t[0x09] = e(
        "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        T::Rc,
        O::RdmaWrite,
        P::Last,
        IMM,
        true,
    );
    t[0x0a] = e(
        "RC_RDMA_WRITE_ONLY",
        T::Rc,
        O::RdmaWrite,
        P::Only,
        RETH,
        true,
    );
    t[0x0b] = e(
        "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        T::Rc,
        O::RdmaWrite,
        P::Only,
        RETH_IMM,
        true,
    );
    t[0x0c] = e(
        "RC_RDMA_READ_REQUEST",
        T::Rc,
        O::ReadRequest,
        P::Only,
        RETH,
        false,
    );
    t[0x0d] = e(
        "RC_RDMA_READ_RESPONSE_FIRST",
        T::Rc,
        O::ReadResponse,
        P::First,
        AETH,
        true,
    );
    t[0x0e] = e(
        "RC_RDMA_READ_RESPONSE_MIDDLE",
        T::Rc,
        O::ReadResponse,
        P::Middle,
        N,
        true,
    );
    t[0x0f] = e(
        "RC_RDMA_READ_RESPONSE_LAST",
        T::Rc,
        O::ReadResponse,
        P::Last,
        AETH,
        true,
    );
    t[0x10] = e(
        "RC_RDMA_READ_RESPONSE_ONLY",
        T::Rc,
        O::ReadResponse,
        P::Only,
        AETH,
        true,
    );
    t[0x11] = e(
        "RC_ACKNOWLEDGE",
        T::Rc,
        O::Acknowledge,
        P::Only,
        AETH,
        false,
    );
    t[0x12] = e(
        "RC_ATOMIC_ACKNOWLEDGE",
        T::Rc,
        O::AtomicAcknowledge,
        P::Only,
        AETH_ACK,
        false,
    );
    t[0x13] = e(
        "RC_COMPARE_SWAP",
        T::Rc,
        O::CompareSwap,
        P::Only,
        Headers::ATOMIC_ETH,
        false,
    );
    t[0x14] = e(
        "RC_FETCH_ADD",
        T::Rc,
        O::FetchAdd,
        P::Only,
        Headers::ATOMIC_ETH,
        false,
    );
    // Memory Placement Extensions (IBA 1.5, annex A19): FETH then RETH,
    // and a RETH with 8 bytes of data; answered with a zero-length
    // RDMA READ RESPONSE ONLY, as rxe does.
    t[0x1c] = e(
        "RC_FLUSH",
        T::Rc,
        O::Flush,
        P::Only,
        Headers::FETH.with(Headers::RETH),
        false,
    );
    t[0x1d] = e(
        "RC_ATOMIC_WRITE",
        T::Rc,
        O::AtomicWrite,
        P::Only,
        RETH,
        true,
    );
    t[0x16] = e(
        "RC_SEND_LAST_WITH_INVALIDATE",
        T::Rc,
        O::Send,
        P::Last,
        Headers::IETH,
        true,
    );
    t[0x17] = e(
        "RC_SEND_ONLY_WITH_INVALIDATE",
        T::Rc,
        O::Send,
        P::Only,
        Headers::IETH,
        true,
    );
    // Unreliable connected (prefix 001): sends and writes only.
    t[0x20] = e("UC_SEND_FIRST", T::Uc, O::Send, P::First, N, true);
    t[0x21] = e("UC_SEND_MIDDLE", T::Uc, O::Send, P::Middle, N, true);
    t[0x22] = e("UC_SEND_LAST", T::Uc, O::Send, P::Last, N, true);
    t[0x23] = e(
        "UC_SEND_LAST_WITH_IMMEDIATE",
        T::Uc,
        O::Send,
        P::Last,
        IMM,
        true,
    );
    t[0x24] = e("UC_SEND_ONLY", T::Uc, O::Send, P::Only, N, true);
    t[0x25] = e(
        "UC_SEND_ONLY_WITH_IMMEDIATE",
        T::Uc,
        O::Send,
        P::Only,
        IMM,
        true,
    );
    t[0x26] = e(
        "UC_RDMA_WRITE_FIRST",
        T::Uc,
        O::RdmaWrite,
        P::First,
        RETH,
        true,
    );
    t[0x27] = e(
        "UC_RDMA_WRITE_MIDDLE",
        T::Uc,
        O::RdmaWrite,
        P::Middle,
        N,
        true,
    );
    t[0x28] = e("UC_RDMA_WRITE_LAST", T::Uc, O::RdmaWrite, P::Last, N, true);
    t[0x29] = e(
        "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        T::Uc,
        O::RdmaWrite,
        P::Last,
        IMM,
        true,
    );
    t[0x2a] = e(
        "UC_RDMA_WRITE_ONLY",
        T::Uc,
        O::RdmaWrite,
        P::Only,
        RETH,
        true,
    );
    t[0x2b] = e(
        "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        T::Uc,
        O::RdmaWrite,
        P::Only,
        RETH_IMM,
        true,
    );
    // Unreliable datagram (prefix 011): single-packet sends.
    t[0x64] = e("UD_SEND_ONLY", T::Ud, O::Send, P::Only, DETH, true);
    t[0x65] = e(
        "UD_SEND_ONLY_WITH_IMMEDIATE",
        T::Ud,
        O::Send,
        P::Only,
        DETH_IMM,
        true,
    );
    // RoCE v2 CNP (Annex A17.9.2): BTH + 16 reserved bytes.
    t[0x81] = e("CNP", T::Cnp, O::Cnp, P::Only, Headers::CNP_PAD, false);
    // Extended reliable connected (prefix 101): RC's operations at RC's
    // opcode + 0xa0, the requests with an XRCETH first (IBA 9.3.7; rxe's
    // XRC patches and the NICs lay them out so), the responses exactly as
    // RC's. The memory placement extensions (0x1c, 0x1d) have no XRC
    // opcode here: neither rxe nor rdma-core's providers send them on XRC.
    let mut i = 0;
    while i < XRC_NAMES.len() {
        let (rc, name) = XRC_NAMES[i];
        if let Some(r) = t[rc as usize] {
            let headers = if r.operation.is_request() {
                r.headers.with(Headers::XRCETH)
            } else {
                r.headers
            };
            t[XRC_PREFIX as usize | rc as usize] =
                e(name, T::Xrc, r.operation, r.position, headers, r.payload);
        }
        i += 1;
    }
    t
};

/// The transport prefix of XRC opcodes (IBA 9.2 table 38: 101).
pub const XRC_PREFIX: u8 = 0xa0;

/// The RC opcodes XRC repeats (at `XRC_PREFIX | opcode`) and the XRC names,
/// as Wireshark spells them.
const XRC_NAMES: [(u8, &str); 23] = [
    (0x00, "XRC_SEND_FIRST"),
    (0x01, "XRC_SEND_MIDDLE"),
    (0x02, "XRC_SEND_LAST"),
    (0x03, "XRC_SEND_LAST_WITH_IMMEDIATE"),
    (0x04, "XRC_SEND_ONLY"),
    (0x05, "XRC_SEND_ONLY_WITH_IMMEDIATE"),
    (0x06, "XRC_RDMA_WRITE_FIRST"),
    (0x07, "XRC_RDMA_WRITE_MIDDLE"),
    (0x08, "XRC_RDMA_WRITE_LAST"),
    (0x09, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE"),
    (0x0a, "XRC_RDMA_WRITE_ONLY"),
    (0x0b, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"),
    (0x0c, "XRC_RDMA_READ_REQUEST"),
    (0x0d, "XRC_RDMA_READ_RESPONSE_FIRST"),
    (0x0e, "XRC_RDMA_READ_RESPONSE_MIDDLE"),
    (0x0f, "XRC_RDMA_READ_RESPONSE_LAST"),
    (0x10, "XRC_RDMA_READ_RESPONSE_ONLY"),
    (0x11, "XRC_ACKNOWLEDGE"),
    (0x12, "XRC_ATOMIC_ACKNOWLEDGE"),
    (0x13, "XRC_COMPARE_SWAP"),
    (0x14, "XRC_FETCH_ADD"),
    (0x16, "XRC_SEND_LAST_WITH_INVALIDATE"),
    (0x17, "XRC_SEND_ONLY_WITH_INVALIDATE"),
];

static TABLE: [Option<OpcodeInfo>; 256] = TABLE_DATA;

/// The slot of (transport, operation, position, immediate, invalidate) in
/// [`FIND`].
const fn find_slot(t: Transport, o: Operation, p: Position, imm: bool, inv: bool) -> usize {
    ((((t as usize) * OPERATIONS + o as usize) * 4 + p as usize) * 2 + imm as usize) * 2
        + inv as usize
}
const OPERATIONS: usize = Operation::Cnp as usize + 1;
const FIND_LEN: usize = (Transport::Xrc as usize + 1) * OPERATIONS * 4 * 2 * 2;

/// The table inverted (computed from it at compile time): what
/// [`Opcode::find`] looks up, so a requester builds opcodes by name at the
/// cost of one load.
static FIND: [Option<Opcode>; FIND_LEN] = {
    let mut f: [Option<Opcode>; FIND_LEN] = [None; FIND_LEN];
    let mut v = 0;
    while v < 256 {
        if let Some(i) = &TABLE_DATA[v] {
            let slot = find_slot(
                i.transport,
                i.operation,
                i.position,
                i.immediate(),
                i.invalidate(),
            );
            f[slot] = Some(Opcode(v as u8));
        }
        v += 1;
    }
    f
};

impl Opcode {
    /// RC ACKNOWLEDGE.
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    /// RC ATOMIC ACKNOWLEDGE.
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    /// XRC ACKNOWLEDGE.
    pub const XRC_ACKNOWLEDGE: Opcode = Opcode(0xb1);
    /// XRC ATOMIC ACKNOWLEDGE.
    pub const XRC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0xb2);
    /// RoCE v2 congestion notification packet.
    pub const CNP: Opcode = Opcode(0x81);

    /// The table entry, or `None` for an opcode softrdma does not know.
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[self.0 as usize].as_ref()
    }

    /// Name of the opcode (`UNKNOWN` when not in the table).
    pub fn name(self) -> &'static str {
        self.info().map_or("UNKNOWN", |i| i.name)
    }

    /// Finds the opcode for a transport, operation, position and the optional
    /// immediate / invalidate variants (one table load).
    #[inline]
    pub fn find(
        transport: Transport,
        operation: Operation,
        position: Position,
        immediate: bool,
        invalidate: bool,
    ) -> Option<Opcode> {
        FIND[find_slot(transport, operation, position, immediate, invalidate)]
    }

    /// Every opcode in the table.
    pub fn all() -> impl Iterator<Item = Opcode> {
        (0..=255u8).map(Opcode).filter(|o| o.info().is_some())
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#04x})", self.name(), self.0)
    }
}
impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent_for_all_256_opcodes() {
        let mut known = 0;
        for v in 0..=255u8 {
            let op = Opcode(v);
            let Some(i) = op.info() else {
                assert_eq!(op.name(), "UNKNOWN");
                continue;
            };
            known += 1;
            // The transport prefix agrees with the top three bits.
            let prefix = v >> 5;
            let expected = match i.transport {
                Transport::Rc => 0,
                Transport::Uc => 1,
                Transport::Rd => 2,
                Transport::Ud => 3,
                Transport::Cnp => 4,
                Transport::Xrc => 5,
            };
            assert_eq!(prefix, expected, "{op:?}");
            assert!(i.name.starts_with(match i.transport {
                Transport::Rc => "RC_",
                Transport::Uc => "UC_",
                Transport::Rd => "RD_",
                Transport::Ud => "UD_",
                Transport::Cnp => "CNP",
                Transport::Xrc => "XRC_",
            }));
            // XRCETH on XRC requests, and nowhere else.
            assert_eq!(
                i.headers.contains(Headers::XRCETH),
                i.transport == Transport::Xrc && i.is_request(),
                "{op:?}"
            );
            // XRC repeats RC's entry at RC's opcode + 0xa0, XRCETH aside.
            if i.transport == Transport::Xrc {
                let rc = Opcode(v & 0x1f).info().expect("the RC opcode");
                assert_eq!(
                    (rc.operation, rc.position, rc.payload),
                    (i.operation, i.position, i.payload)
                );
                assert_eq!(
                    rc.headers.with(Headers::XRCETH),
                    i.headers.with(Headers::XRCETH)
                );
                assert_eq!(&i.name[4..], &rc.name[3..], "{op:?}");
            }
            // RETH only at the start of writes, on read requests and on
            // the memory placement requests.
            if i.headers.contains(Headers::RETH) {
                assert!(i.position.starts());
                assert!(matches!(
                    i.operation,
                    Operation::RdmaWrite
                        | Operation::ReadRequest
                        | Operation::Flush
                        | Operation::AtomicWrite
                ));
            }
            // FETH only on FLUSH, right before its RETH.
            assert_eq!(
                i.headers.contains(Headers::FETH),
                i.operation == Operation::Flush
            );
            if i.operation == Operation::RdmaWrite && i.position.starts() {
                assert!(i.headers.contains(Headers::RETH), "{op:?}");
            }
            // Immediate and invalidate only on message ends.
            if i.immediate() || i.invalidate() {
                assert!(i.position.ends());
            }
            assert!(!(i.immediate() && i.invalidate()));
            // UD always has a DETH, nothing else does.
            assert_eq!(
                i.headers.contains(Headers::DETH),
                i.transport == Transport::Ud
            );
            // AETH on responses that begin or end a message.
            if i.operation == Operation::ReadResponse {
                assert_eq!(
                    i.headers.contains(Headers::AETH),
                    i.position != Position::Middle
                );
            }
            assert!(i.is_request() ^ i.is_response() || i.operation == Operation::Cnp);
            // find() returns this opcode back.
            assert_eq!(
                Opcode::find(
                    i.transport,
                    i.operation,
                    i.position,
                    i.immediate(),
                    i.invalidate()
                ),
                Some(op)
            );
        }
        // 25 RC, 12 UC, 2 UD, 1 CNP, 23 XRC.
        assert_eq!(known, 63);
        // Combinations with no opcode find none.
        assert_eq!(
            Opcode::find(
                Transport::Ud,
                Operation::RdmaWrite,
                Position::Only,
                false,
                false
            ),
            None
        );
        assert_eq!(FIND.iter().filter(|o| o.is_some()).count(), 63);
    }

    #[test]
    fn header_offsets_follow_wire_order() {
        let h = Headers::RETH.with(Headers::IMM);
        assert_eq!(h.len(), 20);
        assert_eq!(h.offset_of(Headers::RETH), Some(0));
        assert_eq!(h.offset_of(Headers::IMM), Some(16));
        assert_eq!(h.offset_of(Headers::AETH), None);
        let a = Headers::AETH.with(Headers::ATOMIC_ACK_ETH);
        assert_eq!(a.offset_of(Headers::ATOMIC_ACK_ETH), Some(4));
        assert_eq!(Opcode(0x65).info().unwrap().ext_len(), 12);
        assert_eq!(Opcode(0x13).info().unwrap().ext_len(), 28);
        assert_eq!(Opcode::CNP.info().unwrap().ext_len(), 16);
        // rxe_opcode.c: FLUSH is BTH + FETH (4) + RETH (16); ATOMIC WRITE
        // is BTH + RETH, then the 8-byte payload.
        let flush = Opcode(0x1c).info().unwrap();
        assert_eq!(flush.ext_len(), 20);
        assert_eq!(flush.headers.offset_of(Headers::FETH), Some(0));
        assert_eq!(flush.headers.offset_of(Headers::RETH), Some(4));
        assert!(!flush.payload);
        let aw = Opcode(0x1d).info().unwrap();
        assert_eq!(aw.ext_len(), 16);
        assert!(aw.payload && aw.is_request());
        // IBA 9.3.7: the XRCETH comes first, then RETH/AtomicETH, ImmDt,
        // IETH; XRC responses have none.
        let w = Opcode(0xab).info().unwrap();
        assert_eq!(w.name, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
        assert_eq!(w.ext_len(), 4 + 16 + 4);
        assert_eq!(w.headers.offset_of(Headers::XRCETH), Some(0));
        assert_eq!(w.headers.offset_of(Headers::RETH), Some(4));
        assert_eq!(w.headers.offset_of(Headers::IMM), Some(20));
        let cs = Opcode(0xb3).info().unwrap();
        assert_eq!(cs.ext_len(), 4 + 28);
        assert_eq!(cs.headers.offset_of(Headers::ATOMIC_ETH), Some(4));
        let inv = Opcode(0xb7).info().unwrap();
        assert_eq!(inv.headers.offset_of(Headers::IETH), Some(4));
        assert_eq!(Opcode(0xa1).info().unwrap().ext_len(), 4);
        assert_eq!(Opcode::XRC_ACKNOWLEDGE.info().unwrap().ext_len(), 4);
        assert_eq!(Opcode::XRC_ATOMIC_ACKNOWLEDGE.info().unwrap().ext_len(), 12);
        assert_eq!(Opcode(0xae).info().unwrap().ext_len(), 0);
        assert!(Opcode(0xb5).info().is_none() && Opcode(0xbc).info().is_none());
    }
}
