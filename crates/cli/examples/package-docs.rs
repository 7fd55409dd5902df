//! Renders the `softrdma` command's man pages (one per command and
//! subcommand, section 1) and its bash, zsh and fish completions from the
//! clap definitions, for the Debian package (`scripts/package`):
//!
//!     cargo run --release -p softrdma-cli --example package-docs -- OUT
//!
//! writes `OUT/man1/softrdma.1`, `OUT/man1/softrdma-perf-write-bw.1`, …
//! and `OUT/completions/{softrdma.bash,_softrdma,softrdma.fish}`. The
//! pages' date is `$SOURCE_DATE_EPOCH`'s day (reproducible builds), else
//! today's.

use clap_complete::Shell;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Sections appended to `softrdma(1)`: the files, the environment and the
/// other pages (roff).
const MAIN_EXTRA: &str = r#".SH ENVIRONMENT
.TP
\fBSOFTRDMA_ADDR\fR
The one device softrdma0's address: an IP address, \fBauto\fR (a free loopback address 127.0.0.x), \fBif:\fR\fINAME\fR (the address of interface NAME) or \fBfirst\fR (the first non-loopback interface that is up). The config file is then not read.
.TP
\fBSOFTRDMA_CONFIG\fR
The config file (default \fI/etc/softrdma.conf\fR).
.TP
\fBSOFTRDMA_MTU\fR
Active MTU in bytes, 256 to 4096 (default 4096), of devices that do not name one.
.TP
\fBSOFTRDMA_PCAP\fR
Capture every packet to this file (\fB{addr}\fR: the device's address); read it with \fBsoftrdma dump\fR or Wireshark.
.TP
\fBSOFTRDMA_FAULTS\fR
Fault injection on every device's datagrams, for testing programs under loss: rules \fIITEM\fR,\fIITEM\fR;... with items \fBseed=\fR\fIN\fR, \fBon=send|recv|both\fR, \fBpeer=\fR\fIIP\fR, \fBloss=\fR, \fBdup=\fR, \fBreorder=\fR, \fBcorrupt=\fR (probabilities: 0.05 or 5%), \fBreorder-every=\fR\fIN\fR, \fBdelay=\fR, \fBjitter=\fR, \fBreorder-delay=\fR (times: 200us, 1ms), \fBdrop-acks=\fR\fIN\fR, \fBrem-access=\fR[\fIOP\fR:]\fIN\fR, \fBrem-inv-req=\fR, \fBrem-op=\fR, \fBrnr=\fR\fIN\fR (e.g. \fBseed=7,loss=1%,dup=0.5%\fR). Each device says the seed it runs with; its counters (\fBfault_*\fR) count every fault.
.TP
\fBSOFTRDMA_LOG\fR
Log filter (\fBdebug\fR, \fBsoftrdma::engine=debug\fR, ...).
.TP
\fBSOFTRDMA_POLL_YIELD\fR
Whether idle completion-queue polls yield the CPU: \fB1\fR, \fB0\fR or \fBauto\fR.
.TP
\fBSOFTRDMA_VENDOR_ID\fR, \fBSOFTRDMA_VENDOR_PART_ID\fR
The PCI identity the verbs library reports (default 0).
.TP
\fBSOFTRDMA_IBVERBS_DIR\fR
Where \fBsoftrdma exec\fR finds libibverbs.so.1 (default: beside the binary, then \fI../lib/softrdma\fR from it).
.SH FILES
.TP
\fI/etc/softrdma.conf\fR
Devices, one per line: \fINAME ADDRESS\fR [\fBmtu=\fR\fIBYTES\fR] [\fBfaults=\fR\fISPEC\fR] (SPEC as \fBSOFTRDMA_FAULTS\fR, no spaces); \fB#\fR starts a comment. Without a device line (as installed), one device, softrdma0, on a free loopback address.
.TP
\fI/usr/lib/softrdma/libibverbs.so.1\fR, \fIlibrdmacm.so.1\fR
softrdma's libibverbs and librdmacm (one file, two names), which \fBsoftrdma exec\fR puts first on LD_LIBRARY_PATH; the system's libraries are not replaced.
.TP
\fI/usr/lib/softrdma/libsoftrdma_preload.so\fR
Device visibility for UCX and MPI (LD_PRELOAD by \fBsoftrdma exec\fR).
.SH SEE ALSO
\fBsoftrdma-devinfo\fR(1), \fBsoftrdma-perf\fR(1), \fBsoftrdma-dump\fR(1), \fBsoftrdma-exec\fR(1), \fBibv_devinfo\fR(1), \fBib_write_bw\fR(1)
"#;

/// Appended to `softrdma-exec(1)`.
const EXEC_EXTRA: &str = r#".SH EXAMPLES
.nf
softrdma exec \-\- ibv_devinfo \-v
softrdma exec \-\- ibv_rc_pingpong \-g 0 &
softrdma exec \-\- ibv_rc_pingpong \-g 0 localhost
softrdma exec \-\-addr 127.0.77.1 \-\- rping \-s \-a 127.0.77.1 \-C 10 &
softrdma exec \-\-addr 127.0.77.2 \-\- rping \-c \-a 127.0.77.1 \-C 10
.fi
.SH FILES
\fI/usr/lib/softrdma/\fR (installed layout): libibverbs.so.1, librdmacm.so.1, libsoftrdma_preload.so.
.SH SEE ALSO
\fBsoftrdma\fR(1)
"#;

fn date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Writes the page of `cmd` and of each of its subcommands, recursively.
fn pages(cmd: &clap::Command, dir: &Path, date: &str, n: &mut usize) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages(sub, dir, date, n)?;
    }
    let version = cmd.get_version().unwrap_or(env!("CARGO_PKG_VERSION"));
    let man = clap_mangen::Man::new(cmd.clone())
        .date(date)
        .source(format!("softrdma {version}"))
        .manual("softrdma manual");
    let path = dir.join(man.get_filename());
    let mut f = std::fs::File::create(&path)?;
    man.render(&mut f)?;
    match cmd.get_display_name().unwrap_or(cmd.get_name()) {
        "softrdma" => f.write_all(MAIN_EXTRA.as_bytes())?,
        "softrdma-exec" => f.write_all(EXEC_EXTRA.as_bytes())?,
        _ => {}
    }
    *n += 1;
    Ok(())
}

fn main() -> std::io::Result<()> {
    let out: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            eprintln!("usage: package-docs OUTDIR");
            std::process::exit(2)
        });
    let man1 = out.join("man1");
    let comp = out.join("completions");
    std::fs::create_dir_all(&man1)?;
    std::fs::create_dir_all(&comp)?;
    // As clap shows it: display names (softrdma-perf-write-bw), no `help`
    // subcommand page.
    let mut cmd = softrdma_cli::cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut n = 0;
    pages(&cmd, &man1, &date(), &mut n)?;
    for (shell, file) in [
        (Shell::Bash, "softrdma.bash"),
        (Shell::Zsh, "_softrdma"),
        (Shell::Fish, "softrdma.fish"),
    ] {
        let mut f = std::fs::File::create(comp.join(file))?;
        clap_complete::generate(shell, &mut softrdma_cli::cli::command(), "softrdma", &mut f);
    }
    println!(
        "{n} man pages in {}, 3 completions in {}",
        man1.display(),
        comp.display()
    );
    Ok(())
}
