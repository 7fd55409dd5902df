//! What the process may do that an ordinary user program may not: the
//! checks the kernel makes at its user boundary (uverbs), made here
//! because softrdma's "kernel side" runs in the program itself.

/// CAP_NET_RAW's bit in the capability sets (linux/capability.h).
const CAP_NET_RAW: u32 = 13;

/// Whether the process has CAP_NET_RAW in its effective set: what the
/// kernel asks of a user program that sets a controlled Q_Key
/// (`modify_qp` in uverbs_cmd.c, EPERM otherwise). Read from
/// `/proc/self/status` each time it is asked (rarely: only for a
/// controlled Q_Key), so a change by `capset` is seen; without `/proc`,
/// no.
pub(crate) fn has_cap_net_raw() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| effective_caps(&s))
        .is_some_and(|caps| caps >> CAP_NET_RAW & 1 == 1)
}

/// The `CapEff:` line of a `/proc/PID/status` text.
fn effective_caps(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_effective_set() {
        let root = "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n\
                    CapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\n";
        assert_eq!(effective_caps(root), Some(0x1ff_ffff_ffff));
        let user = "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n";
        assert_eq!(effective_caps(user), Some(0));
        let raw_only = "CapEff:\t0000000000002000\n";
        assert_eq!(
            effective_caps(raw_only).map(|c| c >> CAP_NET_RAW & 1),
            Some(1)
        );
        assert_eq!(effective_caps("Name:\tx\n"), None);
    }
}
