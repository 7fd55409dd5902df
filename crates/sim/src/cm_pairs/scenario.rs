//! The plans of a CM run: what each connection's client and server and
//! each SIDR pair do, drawn from the seed ([`Scenario::random`]).

use crate::net::LinkConfig;
use softrdma_cm::ServiceId;
use softrdma_link::Rng;
use softrdma_wire::cm::PortSpace;

/// What the server does with a connection request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerPlan {
    /// Accept after `delay_ms` (past 6144 ms the requester's REQ comes
    /// again and is answered with an MRA).
    Accept {
        /// Time to answer.
        delay_ms: u64,
    },
    /// `rdma_reject` (REJ 28 with private data) after `delay_ms`.
    Reject {
        /// Time to answer.
        delay_ms: u64,
    },
    /// Destroy the new id after `delay_ms` (REJ 28 from the CM).
    Destroy {
        /// Time to answer.
        delay_ms: u64,
    },
    /// The server does not listen on the service: REJ 8.
    NoListener,
}

/// What the client does with the REP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientPlan {
    /// RTU after `delay_ms` (past 4096 ms the REP comes again and gets an
    /// MRA).
    Establish {
        /// Time to answer.
        delay_ms: u64,
    },
    /// `rdma_reject` of the REP.
    Reject {
        /// Time to answer.
        delay_ms: u64,
    },
    /// Give up before connecting: destroy the id (REJ "timeout" while the
    /// REQ is pending, REJ 28 when the REP has come).
    DestroyEarly {
        /// Time after the REQ.
        after_ms: u64,
    },
}

/// How an established connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Teardown {
    /// The client disconnects.
    ClientDisconnect,
    /// The server disconnects.
    ServerDisconnect,
    /// Both at once.
    Both,
    /// The client destroys its id (one DREQ, no retries).
    ClientDestroy,
    /// The server destroys its id.
    ServerDestroy,
}

/// One planned connection.
#[derive(Clone, Debug)]
pub struct ConnPlan {
    /// Node of the client.
    pub client: usize,
    /// Node of the server.
    pub server: usize,
    /// When the client connects.
    pub start_ms: u64,
    /// The server's answer.
    pub server_plan: ServerPlan,
    /// The client's answer.
    pub client_plan: ClientPlan,
    /// How it ends.
    pub teardown: Teardown,
    /// How long it stays up.
    pub hold_ms: u64,
    /// When the client's first data packet reaches the server's QP after
    /// the RTU went out (capped at half the hold time): if the RTU was lost
    /// and the REP's retry has not brought another yet, this is what
    /// establishes the server (`notify_established`), as the communication
    /// established event does in Linux. Applications send data before they
    /// disconnect; without it a server whose RTU was lost sees the DREQ
    /// first and is never ESTABLISHED, in Linux as here.
    pub data_ms: u64,
}

/// One planned SIDR resolution.
#[derive(Clone, Debug)]
pub struct SidrPlan {
    /// Node asking.
    pub client: usize,
    /// Node asked.
    pub server: usize,
    /// When.
    pub start_ms: u64,
    /// Whether the server listens on the UD service.
    pub listening: bool,
}

/// A whole run.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The seed of everything.
    pub seed: u64,
    /// The link.
    pub link: LinkConfig,
    /// Nodes.
    pub nodes: usize,
    /// A node that never comes up (its address eats everything).
    pub dead_node: Option<usize>,
    /// A node that dies at a time.
    pub dies: Option<(usize, u64)>,
    /// Connections.
    pub conns: Vec<ConnPlan>,
    /// SIDR resolutions.
    pub sidrs: Vec<SidrPlan>,
    /// When listeners close.
    pub close_listeners_ms: u64,
}

/// The port of the RC listener of every live node.
pub const RC_PORT: u16 = 7174;
/// The port of the UD listener of every live node.
pub const UD_PORT: u16 = 7175;
/// The RC service every live node listens on.
pub const RC_SERVICE: ServiceId = ServiceId::rdma_cm(PortSpace::Tcp, RC_PORT);
/// An RC service nobody listens on.
pub const UNHEARD_SERVICE: ServiceId = ServiceId::rdma_cm(PortSpace::Tcp, 9999);
/// The UD service of the SIDR plans.
pub const UD_SERVICE: ServiceId = ServiceId::rdma_cm(PortSpace::Udp, UD_PORT);

impl Scenario {
    /// A random scenario: `nodes` nodes (at least 3), `conns` connections
    /// and `sidrs` resolutions started in the first 30 s, one node dead
    /// from the start and one dying mid-run when `faults`.
    pub fn random(
        seed: u64,
        link: LinkConfig,
        nodes: usize,
        conns: usize,
        sidrs: usize,
        faults: bool,
    ) -> Scenario {
        let nodes = nodes.max(3);
        let mut rng = Rng::new(seed ^ 0xc0ff_ee00_5ce7_a210);
        let dead_node = faults.then_some(nodes - 1);
        let dies = faults.then(|| (nodes - 2, 20_000 + rng.below(20_000)));
        let mut out = Scenario {
            seed,
            link,
            nodes,
            dead_node,
            dies,
            conns: Vec::new(),
            sidrs: Vec::new(),
            close_listeners_ms: 400_000,
        };
        let pick = |rng: &mut Rng, n: u64| rng.below(n);
        for _ in 0..conns {
            let client = pick(&mut rng, nodes as u64) as usize;
            let mut server = pick(&mut rng, nodes as u64 - 1) as usize;
            if server >= client {
                server += 1;
            }
            let server_plan = match pick(&mut rng, 20) {
                0..=13 => ServerPlan::Accept {
                    delay_ms: if pick(&mut rng, 4) == 0 {
                        6_500 + pick(&mut rng, 20_000)
                    } else {
                        pick(&mut rng, 3_000)
                    },
                },
                14..=15 => ServerPlan::Reject {
                    delay_ms: pick(&mut rng, 2_000),
                },
                16..=17 => ServerPlan::Destroy {
                    delay_ms: pick(&mut rng, 2_000),
                },
                _ => ServerPlan::NoListener,
            };
            let client_plan = match pick(&mut rng, 20) {
                0..=16 => ClientPlan::Establish {
                    delay_ms: if pick(&mut rng, 4) == 0 {
                        4_500 + pick(&mut rng, 6_000)
                    } else {
                        pick(&mut rng, 2_000)
                    },
                },
                17..=18 => ClientPlan::Reject {
                    delay_ms: pick(&mut rng, 2_000),
                },
                _ => ClientPlan::DestroyEarly {
                    after_ms: pick(&mut rng, 3_000),
                },
            };
            let teardown = match pick(&mut rng, 5) {
                0 => Teardown::ClientDisconnect,
                1 => Teardown::ServerDisconnect,
                2 => Teardown::Both,
                3 => Teardown::ClientDestroy,
                _ => Teardown::ServerDestroy,
            };
            out.conns.push(ConnPlan {
                client,
                server,
                start_ms: pick(&mut rng, 30_000),
                server_plan,
                client_plan,
                teardown,
                hold_ms: 5_000 + pick(&mut rng, 60_000),
                data_ms: 1 + pick(&mut rng, 10_000),
            });
        }
        for _ in 0..sidrs {
            let client = pick(&mut rng, nodes as u64) as usize;
            let mut server = pick(&mut rng, nodes as u64 - 1) as usize;
            if server >= client {
                server += 1;
            }
            out.sidrs.push(SidrPlan {
                client,
                server,
                start_ms: pick(&mut rng, 30_000),
                listening: pick(&mut rng, 4) != 0,
            });
        }
        out
    }
}
