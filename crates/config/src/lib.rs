//! softrdma's configuration, read once per process and typed.
//!
//! Every setting has a value and a [`Source`]: an option the program (or
//! a command-line flag) gave, an environment variable, a line of the
//! config file, or the default. Where several apply, the more specific
//! wins: **option > environment > config file > default**, except that a
//! device's line in the config file (its `mtu=`) is more specific than the
//! process-wide `SOFTRDMA_MTU`.
//!
//! A value that does not parse is an error naming the variable (or the
//! file and line) and what it accepts; nothing is silently ignored. An
//! empty variable counts as unset.
//!
//! | variable | accepts | default |
//! | --- | --- | --- |
//! | `SOFTRDMA_ADDR` | the one device `softrdma0`'s `ADDRESS` (see below); the config file is then not read | none |
//! | `SOFTRDMA_CONFIG` | the config file | `/etc/softrdma.conf` if it exists |
//! | `SOFTRDMA_MTU` | active MTU in bytes, 256–4096, of devices that do not name one | the interface's: its MTU less 80 bytes of RoCE headers, rounded down (1500 → 1024, 9000 or `lo` → 4096), as rxe; 4096 if unknown |
//! | `SOFTRDMA_PCAP` | capture every packet to this file (`{addr}`: the device's address) | none |
//! | `SOFTRDMA_SPIN_US` | progress thread's busy-poll window in µs, 0–1000000 | 20 |
//! | `SOFTRDMA_REFUSE_SENDS` | fault injection: fraction 0–1 of send calls refused | 0 |
//! | `SOFTRDMA_FAULTS` | fault injection on the device's datagrams: seeded loss, duplication, reordering, delay, corruption, dropped ACKs, answers with NAKs (the language: [`faults`]), for devices whose line has no `faults=` | none |
//! | `SOFTRDMA_POLL_YIELD` | `1`/`yes`/`always`, `0`/`no`/`never`, `auto`: idle CQ polls yield the CPU | auto |
//! | `SOFTRDMA_VENDOR_ID`, `SOFTRDMA_VENDOR_PART_ID` | the PCI identity the C library reports, decimal or 0x hex | `0xffffff` (see [`DEFAULT_VENDOR_ID`]), 0 |
//! | `SOFTRDMA_LOG` | log filter, tracing-subscriber's EnvFilter syntax (`debug`, `softrdma::engine=debug`; targets `softrdma::engine`, `softrdma::rdma_cm`) | off |
//! | `SOFTRDMA_IBVERBS_DIR` | where `softrdma exec` finds libibverbs.so | beside the binary |
//! | `SOFTRDMA_SAME_HOST` | `shm` (or `on`): packets between processes of this host that share devices move through shared memory; `udp` (or `off`): through the kernel's UDP, as between hosts | `shm` |
//!
//! The config file may hold `same_host = udp` (or `shm`) on a line of its
//! own (what `SOFTRDMA_SAME_HOST` says wins over it). It has one device per line, `NAME ADDRESS [mtu=BYTES]
//! [faults=SPEC]` (`SPEC` in the language of `SOFTRDMA_FAULTS`, without
//! spaces); `#` starts a comment. `ADDRESS` is an IP address, `auto` (a free
//! loopback address 127.0.0.x when the device opens), `if:NAME` (the
//! address of interface NAME, IPv4 first) or `first` (the first
//! non-loopback interface that is up). With neither `SOFTRDMA_ADDR` nor a
//! config file there is one device, `softrdma0`, on `auto`; so it is with
//! a `/etc/softrdma.conf` that has no device line (the package's, all
//! comments), while a file named by `SOFTRDMA_CONFIG` with none gives no
//! device.
//!
//! softrdma (the Rust API, and through it libibverbs.so.1 and the
//! `softrdma` command) and libsoftrdma_preload.so read it here, so they
//! agree.

mod addr;
pub mod faults;

pub use addr::{interfaces, AddrSpec, IfAddr, ADDR_WANT};
pub use faults::{FaultSpec, FAULTS_WANT};
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The config file read when `SOFTRDMA_CONFIG` is not set, if it exists.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/softrdma.conf";
/// The device of `SOFTRDMA_ADDR` and of the loopback default.
pub const DEFAULT_DEVICE: &str = "softrdma0";
/// Default active MTU in bytes.
pub const DEFAULT_MTU: u32 = 4096;
/// Smallest and largest MTU in bytes.
pub const MTU_RANGE: std::ops::RangeInclusive<u32> = 256..=4096;
/// What an MTU accepts (for error messages).
pub const MTU_WANT: &str = "an MTU in bytes from 256 to 4096 (e.g. 1024 or 4096)";
/// Default busy-poll window of the progress thread, µs.
pub const DEFAULT_SPIN_US: u64 = 20;
/// The vendor ID softrdma reports (`ibv_device_attr.vendor_id`, an IEEE
/// OUI): `0xffffff`, what Linux's software RoCE device (rxe) reports. It
/// is no OUI the IEEE can assign (all ones), so no program mistakes
/// softrdma for a vendor's hardware — perftest, UCX, Open MPI and
/// rdma-core's tests choose Mellanox/Intel/Broadcom/Amazon code paths by
/// vendor and part ID — and programs that know rxe treat softrdma as the
/// software RoCE device they know. It is not 0, which rdma-core's tests
/// reject (`test_query_device`: a device must name a vendor).
pub const DEFAULT_VENDOR_ID: u32 = 0x00ff_ffff;
/// The vendor part ID softrdma reports by default: 0, as rxe.
pub const DEFAULT_VENDOR_PART_ID: u32 = 0;
/// Entries of a device port's GID table. Index 0 holds the device's one
/// GID (its address, RoCE v2); the others are empty, as the unused entries
/// of a kernel device's table are (`ibv_query_gid` gives zeros,
/// `ibv_query_gid_ex` ENODATA). A table longer than its populated part is
/// what programs meet on every RoCE device (rxe: 1024 entries, mlx5: 255).
/// Here because the C library and the sysfs view of the preload library
/// must agree on it.
pub const GID_TABLE_LEN: u32 = 16;
/// Longest device name (`IBV_SYSFS_NAME_MAX` less the NUL).
pub const DEVICE_NAME_MAX: usize = 63;

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Nothing set it.
    Default,
    /// This environment variable.
    Env(&'static str),
    /// This line of this config file.
    File {
        /// The file.
        path: PathBuf,
        /// The line (from 1).
        line: usize,
    },
    /// The program's options (`DeviceOptions`, a command-line flag).
    Option,
    /// The network interface the device's address is on (its MTU: the
    /// port MTU follows it, as rxe's follows its netdev's).
    Interface(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Env(v) => write!(f, "env {v}"),
            Source::File { path, line } => write!(f, "{}:{line}", path.display()),
            Source::Option => f.write_str("option"),
            Source::Interface(n) => write!(f, "interface {n}"),
        }
    }
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Setting<T> {
    /// The value in force.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

impl<T> Setting<T> {
    /// The default value.
    pub fn default_value(value: T) -> Self {
        Setting {
            value,
            source: Source::Default,
        }
    }

    /// This setting, unless the program's option says otherwise.
    pub fn or_option(self, option: Option<T>) -> Self {
        match option {
            Some(value) => Setting {
                value,
                source: Source::Option,
            },
            None => self,
        }
    }
}

/// A device as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceEntry {
    /// Its name (`ibv_get_device_name`).
    pub name: String,
    /// Its address.
    pub addr: Setting<AddrSpec>,
    /// Its active MTU in bytes.
    pub mtu: Setting<u32>,
    /// Its fault injection (its line's `faults=`, else `SOFTRDMA_FAULTS`).
    pub faults: Setting<Option<FaultSpec>>,
}

/// Why the configuration is not usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// An environment variable with a value it does not accept.
    #[error("{var}={value:?}: want {want}")]
    Var {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What it accepts.
        want: String,
    },
    /// A line of the config file that does not parse.
    #[error("{}:{line}: {msg}", .path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// The line (from 1).
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// The config file named by `SOFTRDMA_CONFIG` (or the default one) cannot be read.
    #[error("{} ({from}): {error}", .path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What named it.
        from: Source,
        /// The I/O error.
        error: String,
    },
    /// An address that names an interface this host does not have.
    #[error("{from} {spec}: {msg}")]
    Resolve {
        /// Where the address was given.
        from: Source,
        /// The address.
        spec: AddrSpec,
        /// Why it does not resolve.
        msg: String,
    },
}

/// The whole configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The devices: `softrdma0` at `SOFTRDMA_ADDR`, else those of the
    /// config file, else `softrdma0` on `auto`.
    pub devices: Vec<DeviceEntry>,
    /// The config file read, if any.
    pub config_file: Setting<Option<PathBuf>>,
    /// `SOFTRDMA_MTU`: the MTU of devices that do not name one.
    pub mtu: Setting<u32>,
    /// `SOFTRDMA_PCAP`: capture file.
    pub pcap: Setting<Option<PathBuf>>,
    /// `SOFTRDMA_SPIN_US`: busy-poll window, µs.
    pub spin_us: Setting<u64>,
    /// `SOFTRDMA_REFUSE_SENDS`: fraction of send calls refused.
    pub refuse_sends: Setting<f64>,
    /// `SOFTRDMA_FAULTS`: fault injection of devices whose line has no
    /// `faults=`.
    pub faults: Setting<Option<FaultSpec>>,
    /// `SOFTRDMA_POLL_YIELD`: `None` decides by the host (auto).
    pub poll_yield: Setting<Option<bool>>,
    /// `SOFTRDMA_VENDOR_ID`.
    pub vendor_id: Setting<u32>,
    /// `SOFTRDMA_VENDOR_PART_ID`.
    pub vendor_part_id: Setting<u32>,
    /// `SOFTRDMA_LOG`: the log filter (checked where the log is installed).
    pub log: Setting<Option<String>>,
    /// `SOFTRDMA_IBVERBS_DIR`.
    pub ibverbs_dir: Setting<Option<PathBuf>>,
    /// `SOFTRDMA_SAME_HOST` (the config file's `same_host =`): `true`
    /// (`shm`) lets the same-host path carry packets between processes
    /// of this host; `false` (`udp`) sends them through the kernel.
    pub same_host: Setting<bool>,
}

/// What `SOFTRDMA_SAME_HOST` and `same_host =` accept.
pub const SAME_HOST_WANT: &str = "shm (or on) or udp (or off)";

/// `shm` / `udp`.
fn parse_same_host(s: &str) -> Option<bool> {
    match s.trim() {
        "shm" | "on" | "1" | "yes" => Some(true),
        "udp" | "off" | "0" | "no" => Some(false),
        _ => None,
    }
}

/// Reads the environment for [`Config::load_from`].
pub type EnvFn<'a> = &'a dyn Fn(&str) -> Option<OsString>;
/// Reads a file for [`Config::load_from`].
pub type ReadFn<'a> = &'a dyn Fn(&Path) -> io::Result<String>;

/// One environment variable: its text if set and not empty.
fn text(env: EnvFn<'_>, var: &'static str) -> Result<Option<String>, ConfigError> {
    match env(var) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => v.into_string().map(Some).map_err(|v| ConfigError::Var {
            var,
            value: v.to_string_lossy().into_owned(),
            want: "UTF-8 text".into(),
        }),
    }
}

/// A variable parsed by `parse`, or `default`.
fn var<T>(
    env: EnvFn<'_>,
    var: &'static str,
    default: T,
    want: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Setting<T>, ConfigError> {
    match text(env, var)? {
        None => Ok(Setting::default_value(default)),
        Some(v) => match parse(v.trim()) {
            Some(value) => Ok(Setting {
                value,
                source: Source::Env(var),
            }),
            None => Err(ConfigError::Var {
                var,
                value: v,
                want: want.into(),
            }),
        },
    }
}

/// A path variable.
fn path_var(env: EnvFn<'_>, var: &'static str) -> Setting<Option<PathBuf>> {
    match env(var).filter(|v| !v.is_empty()) {
        Some(v) => Setting {
            value: Some(PathBuf::from(v)),
            source: Source::Env(var),
        },
        None => Setting::default_value(None),
    }
}

/// `SOFTRDMA_FAULTS`: the error names the variable, the item that is
/// wrong and what the variable accepts.
fn fault_var(env: EnvFn<'_>) -> Result<Setting<Option<FaultSpec>>, ConfigError> {
    const VAR: &str = "SOFTRDMA_FAULTS";
    match text(env, VAR)? {
        None => Ok(Setting::default_value(None)),
        Some(v) => match FaultSpec::parse(&v) {
            Ok(spec) => Ok(Setting {
                value: Some(spec),
                source: Source::Env(VAR),
            }),
            Err(why) => Err(ConfigError::Var {
                var: VAR,
                value: v,
                want: format!("{FAULTS_WANT} ({why})"),
            }),
        },
    }
}

/// An MTU in bytes.
pub fn parse_mtu(s: &str) -> Option<u32> {
    s.trim().parse().ok().filter(|m| MTU_RANGE.contains(m))
}

/// A 32-bit number, decimal or `0x` hex.
fn parse_u32(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

impl Config {
    /// The configuration of this process: read once, on first use, from
    /// the environment and the config file.
    pub fn global() -> Result<&'static Config, ConfigError> {
        static GLOBAL: OnceLock<Result<Config, ConfigError>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                Config::load_from(&|v| std::env::var_os(v), &|p| std::fs::read_to_string(p))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Reads the configuration from `env` and the config file through
    /// `read` (tests pass their own). Addresses are checked for form
    /// only; [`Config::resolve`] finds those given by interface.
    pub fn load_from(env: EnvFn<'_>, read: ReadFn<'_>) -> Result<Config, ConfigError> {
        let mtu = var(env, "SOFTRDMA_MTU", DEFAULT_MTU, MTU_WANT, parse_mtu)?;
        let spin_us = var(
            env,
            "SOFTRDMA_SPIN_US",
            DEFAULT_SPIN_US,
            "microseconds from 0 to 1000000",
            |s| s.parse().ok().filter(|&u| u <= 1_000_000),
        )?;
        let refuse_sends = var(
            env,
            "SOFTRDMA_REFUSE_SENDS",
            0.0,
            "a fraction from 0 to 1 (e.g. 0.3)",
            |s| s.parse().ok().filter(|f: &f64| (0.0..=1.0).contains(f)),
        )?;
        let faults = fault_var(env)?;
        let poll_yield = var(
            env,
            "SOFTRDMA_POLL_YIELD",
            None,
            "1, yes or always; 0, no or never; or auto",
            |s| match s {
                "1" | "yes" | "always" => Some(Some(true)),
                "0" | "no" | "never" => Some(Some(false)),
                "auto" => Some(None),
                _ => None,
            },
        )?;
        let id_want = "a number, decimal or 0x hex (e.g. 0x02c9)";
        let vendor_id = var(
            env,
            "SOFTRDMA_VENDOR_ID",
            DEFAULT_VENDOR_ID,
            id_want,
            parse_u32,
        )?;
        let vendor_part_id = var(
            env,
            "SOFTRDMA_VENDOR_PART_ID",
            DEFAULT_VENDOR_PART_ID,
            id_want,
            parse_u32,
        )?;
        let log = var(env, "SOFTRDMA_LOG", None, "", |s| Some(Some(s.to_string())))?;
        let addr = var(env, "SOFTRDMA_ADDR", None, ADDR_WANT, |s| {
            AddrSpec::parse(s).ok().map(Some)
        })?;
        let entry = |addr: Setting<AddrSpec>| DeviceEntry {
            name: DEFAULT_DEVICE.into(),
            addr,
            mtu: mtu.clone(),
            faults: faults.clone(),
        };
        let mut config_file = Setting::default_value(None);
        let mut same_host = Setting::default_value(true);
        let devices = if let Some(spec) = addr.value {
            vec![entry(Setting {
                value: spec,
                source: addr.source,
            })]
        } else {
            let named = path_var(env, "SOFTRDMA_CONFIG");
            let (path, source) = match named.value {
                Some(p) => (p, named.source),
                None => (PathBuf::from(DEFAULT_CONFIG_FILE), Source::Default),
            };
            match read(&path) {
                // The default file with no device line (as the Debian
                // package installs it: comments only) counts as absent.
                Ok(text) => match parse_file(&path, &text, &mtu, &faults, &mut same_host)? {
                    list if list.is_empty() && source == Source::Default => {
                        vec![entry(Setting::default_value(AddrSpec::Auto))]
                    }
                    list => {
                        config_file = Setting {
                            value: Some(path),
                            source,
                        };
                        list
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::NotFound && source == Source::Default => {
                    vec![entry(Setting::default_value(AddrSpec::Auto))]
                }
                Err(e) => {
                    return Err(ConfigError::File {
                        path,
                        from: source,
                        error: e.to_string(),
                    })
                }
            }
        };
        let same_host_env = var(
            env,
            "SOFTRDMA_SAME_HOST",
            same_host.value,
            SAME_HOST_WANT,
            parse_same_host,
        )?;
        if same_host_env.source != Source::Default {
            same_host = same_host_env;
        }
        Ok(Config {
            devices,
            config_file,
            same_host,
            mtu,
            pcap: path_var(env, "SOFTRDMA_PCAP"),
            spin_us,
            refuse_sends,
            faults,
            poll_yield,
            vendor_id,
            vendor_part_id,
            log,
            ibverbs_dir: path_var(env, "SOFTRDMA_IBVERBS_DIR"),
        })
    }

    /// The configured device `name`.
    pub fn device(&self, name: &str) -> Option<&DeviceEntry> {
        self.devices.iter().find(|d| d.name == name)
    }

    /// Every process-wide setting as (name, value, source), for people.
    pub fn describe(&self) -> Vec<(&'static str, String, &Source)> {
        fn opt<T: fmt::Display>(v: &Option<T>, none: &str) -> String {
            v.as_ref().map_or_else(|| none.to_string(), T::to_string)
        }
        fn path(v: &Option<PathBuf>, none: &str) -> String {
            v.as_ref()
                .map_or_else(|| none.to_string(), |p| p.display().to_string())
        }
        vec![
            (
                "config_file",
                path(&self.config_file.value, "none"),
                &self.config_file.source,
            ),
            ("mtu", self.mtu.value.to_string(), &self.mtu.source),
            ("pcap", path(&self.pcap.value, "none"), &self.pcap.source),
            (
                "spin_us",
                self.spin_us.value.to_string(),
                &self.spin_us.source,
            ),
            (
                "refuse_sends",
                self.refuse_sends.value.to_string(),
                &self.refuse_sends.source,
            ),
            (
                "faults",
                opt(&self.faults.value, "none"),
                &self.faults.source,
            ),
            (
                "same_host",
                (if self.same_host.value { "shm" } else { "udp" }).into(),
                &self.same_host.source,
            ),
            (
                "poll_yield",
                match self.poll_yield.value {
                    None => "auto".into(),
                    Some(b) => (if b { "always" } else { "never" }).into(),
                },
                &self.poll_yield.source,
            ),
            (
                "vendor_id",
                format!("{:#x}", self.vendor_id.value),
                &self.vendor_id.source,
            ),
            (
                "vendor_part_id",
                self.vendor_part_id.value.to_string(),
                &self.vendor_part_id.source,
            ),
            ("log", opt(&self.log.value, "off"), &self.log.source),
            (
                "ibverbs_dir",
                path(&self.ibverbs_dir.value, "beside the softrdma binary"),
                &self.ibverbs_dir.source,
            ),
        ]
    }
}

impl DeviceEntry {
    /// The entry's address on this host: `None` for `auto`.
    pub fn resolve(&self, ifs: &[IfAddr]) -> Result<Option<std::net::IpAddr>, ConfigError> {
        self.addr
            .value
            .resolve(ifs)
            .map_err(|msg| ConfigError::Resolve {
                from: self.addr.source.clone(),
                spec: self.addr.value.clone(),
                msg,
            })
    }
}

/// The devices of a config file.
fn parse_file(
    path: &Path,
    text: &str,
    mtu: &Setting<u32>,
    faults: &Setting<Option<FaultSpec>>,
    same_host: &mut Setting<bool>,
) -> Result<Vec<DeviceEntry>, ConfigError> {
    let mut out: Vec<DeviceEntry> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = Source::File {
            path: path.to_path_buf(),
            line: i + 1,
        };
        let bad = |msg: String| ConfigError::Line {
            path: path.to_path_buf(),
            line: i + 1,
            msg,
        };
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(v) = line
            .strip_prefix("same_host")
            .and_then(|r| r.trim_start().strip_prefix('='))
        {
            let v = v.trim();
            *same_host = Setting {
                value: parse_same_host(v)
                    .ok_or_else(|| bad(format!("bad same_host {v:?}: want {SAME_HOST_WANT}")))?,
                source: at.clone(),
            };
            continue;
        }
        let mut it = line.split_whitespace();
        let name = it.next().unwrap_or_default().to_string();
        let addr = it.next().ok_or_else(|| {
            bad("missing address (NAME ADDRESS [mtu=BYTES] [faults=SPEC])".into())
        })?;
        let addr = AddrSpec::parse(addr)
            .map_err(|want| bad(format!("bad address {addr:?}: want {want}")))?;
        let mut dev_mtu = mtu.clone();
        let mut dev_faults = faults.clone();
        for opt in it {
            match opt.split_once('=') {
                Some(("faults", v)) => {
                    let f =
                        FaultSpec::parse(v).map_err(|e| bad(format!("bad faults {v:?}: {e}")))?;
                    dev_faults = Setting {
                        value: Some(f),
                        source: at.clone(),
                    };
                }
                Some(("mtu", v)) => {
                    let m = parse_mtu(v)
                        .ok_or_else(|| bad(format!("bad mtu {v:?}: want {MTU_WANT}")))?;
                    dev_mtu = Setting {
                        value: m,
                        source: at.clone(),
                    };
                }
                _ => {
                    return Err(bad(format!(
                        "unknown option {opt:?} (want mtu=BYTES or faults=SPEC)"
                    )))
                }
            }
        }
        if name.len() > DEVICE_NAME_MAX {
            return Err(bad(format!("bad device name {name:?}")));
        }
        if out.iter().any(|d| d.name == name) {
            return Err(bad(format!("duplicate device {name}")));
        }
        out.push(DeviceEntry {
            name,
            addr: Setting {
                value: addr,
                source: at,
            },
            mtu: dev_mtu,
            faults: dev_faults,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
