//! The rdma_cm layer's sans-I/O part (librdmacm's ids over the CM): what
//! it keeps per device and per listener, as data the driver
//! (`softrdma::rdma_cm`) and the simulator (`softrdma_sim::cm_pairs`) both
//! run. It owns no thread, reads no clock and does no I/O; what it decides
//! comes back as values (an [`Admission`], a [`Refused`] report, the
//! [`DeviceCm::deadline`]).
//!
//! - [`DeviceCm`] (`device.rs`): a device's [`Cm`](crate::Cm), the map from
//!   its CM ids to the layer's ids, the one CM listener per service ID the
//!   rdma_cm listeners of a port share, and the requests held for a
//!   listener to come ([`PARK_NS`](crate::limits::PARK_NS));
//! - [`report`] (`event.rs`): what an event of the device's CM means for
//!   the rdma_cm id it names (Linux's `cma_ib_handler`): an rdma_cm
//!   [`EventType`] with its status and parameters, and the id's new
//!   [`IdState`];
//! - [`Listener`] (`listen.rs`): what a listening id binds and which
//!   device's requests it covers, which listener a request belongs to
//!   ([`find`], Linux's `cma_find_listener`) and whether its backlog has
//!   room ([`Listener::admit`]).
//!
//! - [`Ports`] (`ports.rs`): the port tables of the four port spaces, who
//!   may share a port (`cma_check_port`), ephemeral ports.
//!
//! - [`QpChange`] (`qp.rs`): the QP changes of `rdma_init_qp_attr`, the
//!   REP's and the accept's INIT/RTR/RTS, a UD QP's setup, as data the
//!   driver applies.
//!
//! - [`Endpoint`] (`endpoint.rs`, `calls.rs`): the ids themselves, by
//!   number, with their ports, listeners and the devices' CMs: the
//!   program's calls on ids, MADs received and the time in; channel
//!   events ([`IdEvent`]), MADs, QP changes and a deadline out. Beside
//!   it: `gate.rs` (a shared device's listen gate, [`GateAsk`]; a device
//!   forked away sends nothing) and `mcast.rs` (the ids' multicast joins,
//!   [`Join`]). Both softrdma's rdma_cm (one endpoint per process, a thin
//!   driver) and the simulator drive it.

mod calls;
mod device;
mod endpoint;
mod event;
mod gate;
mod listen;
mod mcast;
mod ports;
mod qp;

pub use device::{request_sid, DeviceCm, Refused};
pub use endpoint::{Endpoint, EndpointError, Id, IdEvent, Observed, Options};
pub use event::{report, ConnParam, EventType, IdState, Report, UdParam, ETIMEDOUT};
pub use gate::GateAsk;
pub use listen::{backlog, find, service_id, Admission, Listener, Transport};
pub use mcast::{Join, MCAST_HOP_LIMIT};
pub use ports::{Binding, PortError, Ports};
pub use qp::{init_qp_attr, to_rts, ud_setup, QpChange};
