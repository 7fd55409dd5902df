//! Gloo: allreduce over ibverbs on one host and across two namespaces.

use super::*;

/// `ranks` Gloo processes (rank r at `addrs[r]`, in `nss[r]`), one
/// allreduce algorithm, 1 M floats, 3 iterations, every element checked.
pub(crate) fn gloo_run(exe: &str, algo: &str, addrs: &[String], nss: &[Option<String>]) {
    let store = work_dir(&format!("gloo-{algo}-{}", addrs.len()));
    let store = store.display().to_string();
    let size = addrs.len().to_string();
    let t = Instant::now();
    let procs: Vec<Proc> = addrs
        .iter()
        .enumerate()
        .map(|(r, a)| {
            let rank = r.to_string();
            spawn(
                sx(
                    nss[r].as_deref(),
                    a,
                    exe,
                    &[&rank, &size, &store, algo, "1048576", "3"],
                ),
                &format!("gloo-{algo}-{size}-{r}"),
            )
        })
        .collect();
    for (r, p) in procs.into_iter().enumerate() {
        let d = p.wait(LIMIT);
        d.expect_ok();
        assert!(
            d.out.contains(&format!("rank {r} ok {algo} 1048576 3")),
            "{}",
            d.out
        );
    }
    println!(
        "gloo {algo}, {size} ranks: {:.2} s",
        t.elapsed().as_secs_f64()
    );
}

pub(crate) fn gloo_exe() -> String {
    build(
        "gloo_allreduce.cc",
        "g++",
        &["-lgloo", "-libverbs"],
        "libgloo-dev g++",
    )
}

#[test]
fn gloo_allreduce_on_one_host() {
    let _s = serial();
    let exe = gloo_exe();
    for n in [2, 4] {
        let addrs: Vec<String> = (1..=n).map(|k| format!("127.66.11.{k}")).collect();
        let nss = vec![None; n];
        for algo in ["ring", "hd"] {
            gloo_run(&exe, algo, &addrs, &nss);
        }
    }
}

#[test]
fn gloo_allreduce_across_two_namespaces() {
    let _s = serial();
    let exe = gloo_exe();
    let n = Netns::new(12, 2, None);
    // Even ranks in A, odd ranks in B.
    for ranks in [2, 4] {
        let addrs: Vec<String> = (0..ranks)
            .map(|r| {
                if r % 2 == 0 {
                    n.addrs_a[r / 2].clone()
                } else {
                    n.addrs_b[r / 2].clone()
                }
            })
            .collect();
        let nss: Vec<Option<String>> = (0..ranks)
            .map(|r| Some(if r % 2 == 0 { n.a.clone() } else { n.b.clone() }))
            .collect();
        for algo in ["ring", "hd"] {
            gloo_run(&exe, algo, &addrs, &nss);
        }
    }
}
