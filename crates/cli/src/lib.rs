//! The `softrdma` command line tool as a library, so its parts can be tested
//! and fuzzed: [`dump`] is the `softrdma dump` subcommand (captures are
//! read by `softrdma_pcap`; [`traffic`] sorts their IP traffic) and [`json`]
//! its `--json` output; [`devinfo`] is `softrdma devinfo` and [`perf`] the perftest-like
//! `softrdma perf` tools; [`exec`] runs unmodified verbs programs over
//! softrdma's libibverbs.so.1.
//!
//! Each subcommand lives in its own module with a clap `Args` struct and a
//! `run` function; [`cli`] gathers them into the command, `main.rs` only
//! dispatches.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cli;
pub mod devinfo;
pub mod dump;
pub mod exec;
pub mod json;
pub mod perf;
pub mod rdma;
pub mod traffic;

#[cfg(test)]
mod encap_tests;
