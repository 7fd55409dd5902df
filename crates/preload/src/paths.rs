//! The paths the shim answers, and what it answers. Everything else is
//! `None`: the call goes to libc untouched.
//!
//! For each configured device NAME (see [`crate::config`]):
//!
//! | path | answer |
//! | --- | --- |
//! | `/dev/infiniband/uverbs-NAME` | `/dev/null` (a character device anyone may read and write) |
//! | `/sys/class/infiniband/NAME/ports/1/gid_attrs/types/0` | `RoCE v2\n` |
//! | `/sys/class/infiniband/NAME/ports/1/gid_attrs/ndevs/0` | the interface of the device's address, e.g. `lo\n` |
//!
//! `/sys/class/infiniband` itself and every other path under it stay as
//! they are (absent on a host without RDMA devices): Open MPI's openib BTL
//! wakes up when that directory exists.

use crate::config::{self, DeviceEntry as Dev};

/// What a path is answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The device node: stands for `/dev/null`.
    DevNull,
    /// A read-only file with these contents.
    Text(String),
}

const DEV_PREFIX: &[u8] = b"/dev/infiniband/uverbs-";
const SYS_PREFIX: &[u8] = b"/sys/class/infiniband/";

/// Whether a path may be one of ours: the cheap test every call makes.
#[inline]
pub fn candidate(path: &[u8]) -> bool {
    path.starts_with(DEV_PREFIX) || path.starts_with(SYS_PREFIX)
}

/// The answer for `path` given the configured devices; `netdev` names the
/// interface of a device (called only for an `ndevs` path).
pub fn answer(
    path: &[u8],
    devs: &[Dev],
    netdev: &dyn Fn(&Dev) -> Option<String>,
) -> Option<Answer> {
    let path = std::str::from_utf8(path).ok()?;
    if let Some(name) = path.strip_prefix("/dev/infiniband/uverbs-") {
        return devs
            .iter()
            .any(|d| d.name == name)
            .then_some(Answer::DevNull);
    }
    let rest = path.strip_prefix("/sys/class/infiniband/")?;
    let (name, attr) = rest.split_once('/')?;
    let dev = devs.iter().find(|d| d.name == name)?;
    match attr {
        "ports/1/gid_attrs/types/0" => Some(Answer::Text("RoCE v2\n".into())),
        "ports/1/gid_attrs/ndevs/0" => netdev(dev).map(|n| Answer::Text(format!("{n}\n"))),
        _ => None,
    }
}

/// The answer for `path` in this process (environment, config file,
/// interfaces of this network namespace).
pub fn answer_here(path: &[u8]) -> Option<Answer> {
    if !candidate(path) {
        return None;
    }
    answer(path, config::devices(), &|d| {
        config::netdev(&d.addr.value, &config::interfaces())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_config::{AddrSpec as Addr, Setting};

    #[test]
    fn answers_exactly_the_device_paths() {
        let devs = vec![
            Dev {
                name: "softrdma0".into(),
                addr: Setting::default_value(Addr::Auto),
                mtu: Setting::default_value(4096),
            },
            Dev {
                name: "roce1".into(),
                addr: Setting::default_value(Addr::Iface("va".into())),
                mtu: Setting::default_value(4096),
            },
        ];
        let nd = |d: &Dev| Some(if d.name == "roce1" { "va" } else { "lo" }.to_string());
        let a = |p: &str| answer(p.as_bytes(), &devs, &nd);
        assert_eq!(a("/dev/infiniband/uverbs-softrdma0"), Some(Answer::DevNull));
        assert_eq!(a("/dev/infiniband/uverbs-roce1"), Some(Answer::DevNull));
        assert_eq!(a("/dev/infiniband/uverbs-mlx5_0"), None);
        assert_eq!(a("/dev/infiniband/uverbs-softrdma0/x"), None);
        assert_eq!(a("/dev/infiniband/rdma_cm"), None);
        assert_eq!(a("/dev/infiniband"), None);
        let t = |s: &str| Some(Answer::Text(s.into()));
        assert_eq!(
            a("/sys/class/infiniband/softrdma0/ports/1/gid_attrs/types/0"),
            t("RoCE v2\n")
        );
        assert_eq!(
            a("/sys/class/infiniband/softrdma0/ports/1/gid_attrs/ndevs/0"),
            t("lo\n")
        );
        assert_eq!(
            a("/sys/class/infiniband/roce1/ports/1/gid_attrs/ndevs/0"),
            t("va\n")
        );
        assert_eq!(
            a("/sys/class/infiniband/softrdma0/ports/1/gid_attrs/types/1"),
            None
        );
        assert_eq!(a("/sys/class/infiniband/softrdma0/device/driver"), None);
        assert_eq!(a("/sys/class/infiniband/softrdma0"), None);
        assert_eq!(a("/sys/class/infiniband"), None);
        assert_eq!(a("/sys/class/infiniband/"), None);
        assert_eq!(
            a("/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/0"),
            None
        );
        assert_eq!(a("/etc/passwd"), None);
        assert!(!candidate(b"/etc/passwd"));
        assert!(!candidate(b"dev/infiniband/uverbs-softrdma0"));
        // No netdev known: no answer (UCX then assumes no LAG).
        assert_eq!(
            answer(
                b"/sys/class/infiniband/roce1/ports/1/gid_attrs/ndevs/0",
                &devs,
                &|_| None
            ),
            None
        );
    }
}
