//! librpma: its example scenarios, one test each.

use super::*;

/// One of librpma's example scenarios, 10 runs, each a server and
/// `clients` clients (their own processes) on this host.
pub(crate) fn rpma_scenario(scenario: &str, clients: usize) {
    let _s = serial();
    let exe = build(
        "rpma_scenarios.c",
        "gcc",
        &["-lrpma", "-libverbs"],
        "librpma-dev",
    );
    let t = Instant::now();
    let mut failed = Vec::new();
    for run in 0..10u32 {
        let port = (7400 + run).to_string();
        let n = clients.max(1).to_string();
        let mut server = spawn(
            sx(
                None,
                "127.66.14.1",
                &exe,
                &[scenario, "server", "127.66.14.1", &port, &n],
            ),
            &format!("rpma-{scenario}-{run}-server"),
        );
        assert!(
            server.wait_for("listening", Duration::from_secs(30)),
            "{}",
            server.text()
        );
        let cs: Vec<Proc> = (0..clients.max(1))
            .map(|k| {
                let seed = (7 * k as u32 + run + 1).to_string();
                spawn(
                    sx(
                        None,
                        &format!("127.66.14.{}", k + 2),
                        &exe,
                        &[scenario, "client", "127.66.14.1", &port, &seed],
                    ),
                    &format!("rpma-{scenario}-{run}-client{k}"),
                )
            })
            .collect();
        let mut outs: Vec<Done> = cs
            .into_iter()
            .map(|c| c.wait(Duration::from_secs(30)))
            .collect();
        outs.push(server.wait(Duration::from_secs(30)));
        let bad: Vec<&Done> = outs
            .iter()
            .filter(|d| !d.ok() || !d.out.contains(&format!("ok {scenario} ")))
            .collect();
        if !bad.is_empty() {
            failed.push(format!(
                "run {run}: {}",
                bad.iter()
                    .map(|d| format!("{} exit {:?}:\n{}", d.tag, d.status, d.out))
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
    }
    println!(
        "librpma scenario {scenario}: 10 runs in {:.1} s, {} failed",
        t.elapsed().as_secs_f64(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} of 10 runs failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

macro_rules! rpma_tests {
    ($($name:ident: $scenario:literal, $clients:literal;)*) => {$(
        #[test]
        fn $name() {
            rpma_scenario($scenario, $clients);
        }
    )*};
}

rpma_tests! {
    librpma_01_connection: "01", 1;
    librpma_02_read_to_volatile: "02", 1;
    librpma_03_read_to_persistent: "03", 1;
    librpma_04_write_to_persistent: "04", 1;
    librpma_05_flush_to_persistent: "05", 1;
    librpma_06_multiple_connections: "06", 4;
    librpma_06scch_multiple_connections_shared_channel: "06scch", 4;
    librpma_07_atomic_write: "07", 1;
    librpma_08_messages_ping_pong: "08", 1;
    librpma_08srq_ping_pong_with_srq: "08srq", 1;
    librpma_10_send_with_imm: "10", 1;
    librpma_11_write_with_imm: "11", 1;
    librpma_12_receive_completion_queue: "12", 1;
    librpma_12scch_receive_cq_shared_channel: "12scch", 1;
    librpma_13_ping_pong_with_srq_many_clients: "13", 3;
}
