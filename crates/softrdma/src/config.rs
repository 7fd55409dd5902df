//! The configuration ([`softrdma_config`], re-exported here) and what one
//! device takes from it: [`DeviceSettings`], each value with where it came
//! from (option > environment > config file > default).

use crate::device::DeviceOptions;
use crate::error::{Error, Result};
pub use softrdma_config::*;
use std::path::PathBuf;
use std::time::Duration;

/// The configuration of this process, read once; the first call also
/// installs the log `SOFTRDMA_LOG` asks for. Every entry point (opening a
/// device, the C library's device list) comes through here.
pub fn global() -> std::result::Result<&'static Config, ConfigError> {
    let c = Config::global()?;
    crate::log::install(c)?;
    Ok(c)
}

/// What a device runs with, and where each value came from.
#[derive(Clone, Debug)]
pub struct DeviceSettings {
    /// The configured device it is (config file devices only).
    pub entry: Option<Setting<String>>,
    /// Its address as configured.
    pub addr: Setting<AddrSpec>,
    /// Active MTU in bytes.
    pub mtu: Setting<u32>,
    /// Capture file (`{addr}` not yet replaced).
    pub pcap: Setting<Option<PathBuf>>,
    /// Busy-poll window of the progress thread.
    pub spin: Setting<Duration>,
    /// Fraction of send calls refused (fault injection).
    pub refuse_sends: Setting<f64>,
    /// Faults injected on the device's datagrams (`SOFTRDMA_FAULTS`, the
    /// config file's `faults=`); once the device is open, with the seed it
    /// runs with (drawn when the spec named none), so `softrdma devinfo -v`
    /// and [`crate::Device::settings`] show what replays the run.
    pub faults: Setting<Option<FaultSpec>>,
}

impl DeviceSettings {
    /// The settings of a device opened with `opts` under `cfg`: the
    /// configured device `opts.device` (else the first one) supplies the
    /// address and MTU, the process-wide settings the rest, and every
    /// option set in `opts` wins.
    pub fn new(opts: &DeviceOptions, cfg: &Config) -> Result<DeviceSettings> {
        let entry = match &opts.device {
            Some(name) => Some(cfg.device(name).ok_or_else(|| {
                let names: Vec<&str> = cfg.devices.iter().map(|d| d.name.as_str()).collect();
                Error::InvalidArgument(format!(
                    "no device {name} is configured (devices: {})",
                    names.join(" ")
                ))
            })?),
            None => cfg.devices.first(),
        };
        let (addr, mtu, faults) = match entry {
            Some(e) => (e.addr.clone(), e.mtu.clone(), e.faults.clone()),
            None => (
                Setting::default_value(AddrSpec::Auto),
                cfg.mtu.clone(),
                cfg.faults.clone(),
            ),
        };
        let spin = Setting {
            value: Duration::from_micros(cfg.spin_us.value),
            source: cfg.spin_us.source.clone(),
        };
        Ok(DeviceSettings {
            entry: entry
                .filter(|e| matches!(e.addr.source, Source::File { .. }))
                .map(|e| Setting {
                    value: e.name.clone(),
                    source: e.addr.source.clone(),
                }),
            addr: addr.or_option(opts.addr.map(AddrSpec::Ip)),
            mtu: mtu.or_option(opts.mtu),
            pcap: cfg.pcap.clone().or_option(opts.pcap.clone().map(Some)),
            spin: spin.or_option(opts.spin),
            refuse_sends: cfg.refuse_sends.clone().or_option(opts.refuse_sends),
            faults: faults.or_option(opts.faults.clone().map(Some)),
        })
    }

    /// Every setting as (name, value, source), for people.
    pub fn describe(&self) -> Vec<(&'static str, String, &Source)> {
        let mut v = Vec::new();
        if let Some(e) = &self.entry {
            v.push(("device", e.value.clone(), &e.source));
        }
        let pcap = self
            .pcap
            .value
            .as_ref()
            .map_or_else(|| "none".to_string(), |p| p.display().to_string());
        v.extend([
            ("address", self.addr.value.to_string(), &self.addr.source),
            ("mtu", self.mtu.value.to_string(), &self.mtu.source),
            ("pcap", pcap, &self.pcap.source),
            (
                "spin_us",
                self.spin.value.as_micros().to_string(),
                &self.spin.source,
            ),
            (
                "refuse_sends",
                self.refuse_sends.value.to_string(),
                &self.refuse_sends.source,
            ),
            (
                "faults",
                self.faults
                    .value
                    .as_ref()
                    .filter(|f| f.is_active())
                    .map_or_else(|| "none".to_string(), |f| f.to_string()),
                &self.faults.source,
            ),
        ]);
        v
    }
}
