//! A program run by a test: in a process group of its own (so that
//! killing it kills what it started: `ip netns exec`, a launcher and its
//! ranks) or alone, its stdout and stderr in a file, killed when the test
//! drops it (a test that fails half-way leaves nothing behind).

use crate::profile_dir;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A running program.
pub struct Proc {
    /// The process (`ip netns exec` and `softrdma exec` both exec: its
    /// pid is the program's).
    pub child: Child,
    /// Its stdout and stderr.
    pub out: PathBuf,
    /// The name the test gave it (in the file name and in failures).
    pub tag: String,
    group: bool,
    start: Instant,
    reaped: bool,
}

/// A finished program.
#[derive(Debug)]
pub struct Done {
    /// Its exit code (-1 when a signal ended it), `None` when it was still
    /// running at the limit (and was killed).
    pub status: Option<i32>,
    /// Its stdout and stderr.
    pub out: String,
    /// Seconds from its start to its end (or the limit).
    pub secs: f64,
    /// [`Proc::tag`].
    pub tag: String,
}

impl Done {
    /// Whether it exited 0.
    pub fn ok(&self) -> bool {
        self.status == Some(0)
    }

    /// Panics with the output unless it exited 0.
    pub fn expect_ok(&self) -> &Self {
        assert!(
            self.ok(),
            "{} exited {:?} after {:.1} s:\n{}",
            self.tag,
            self.status,
            self.secs,
            self.out
        );
        self
    }
}

impl Proc {
    /// Starts `cmd` with its stdout and stderr in
    /// `target/<profile>/DIR/<test pid>-TAG.txt` (the directory made if
    /// missing), in a process group of its own when `group`.
    pub fn spawn(mut cmd: Command, dir: &str, tag: &str, group: bool) -> Proc {
        let dir = profile_dir().join(dir);
        let _ = std::fs::create_dir_all(&dir);
        let out = dir.join(format!("{}-{tag}.txt", std::process::id()));
        let f = std::fs::File::create(&out).expect("output file");
        cmd.stdout(f.try_clone().expect("dup")).stderr(f);
        if group {
            cmd.process_group(0);
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("{tag}: {e}"));
        Proc {
            child,
            out,
            tag: tag.to_string(),
            group,
            start: Instant::now(),
            reaped: false,
        }
    }

    /// Its output so far.
    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `sig` to its group (or to it alone, without a group of its
    /// own); quietly nothing when it is gone.
    pub fn kill(&self, sig: i32) {
        let pid = self.child.id() as i32;
        let _ = softrdma_io::signal(if self.group { -pid } else { pid }, sig);
    }

    /// Waits up to `limit` from its start; then kills it (the whole group).
    pub fn wait(mut self, limit: Duration) -> Done {
        let status = loop {
            match self.child.try_wait().expect("wait") {
                Some(s) => break Some(s.code().unwrap_or(-1)),
                None if self.start.elapsed() >= limit => break None,
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        // Whatever is left of the group (a rank of a failed job).
        self.kill(SIGKILL);
        let _ = self.child.wait();
        self.reaped = true;
        Done {
            status,
            out: self.text(),
            secs: self.start.elapsed().as_secs_f64(),
            tag: self.tag.clone(),
        }
    }

    /// Sends `sig` (to the group), then waits up to `limit` more as
    /// [`Proc::wait`].
    pub fn stop(self, sig: i32, limit: Duration) -> Done {
        self.kill(sig);
        let t = self.start.elapsed() + limit;
        self.wait(t)
    }

    /// Waits until the output contains `what` (true), or the program ends
    /// or `limit` passes (false).
    pub fn wait_for(&mut self, what: &str, limit: Duration) -> bool {
        self.wait_until(limit, |o| o.contains(what))
    }

    /// Waits until `f(output)` holds (true), or the program ends or
    /// `limit` passes (false).
    pub fn wait_until(&mut self, limit: Duration, f: impl Fn(&str) -> bool) -> bool {
        let t = Instant::now();
        while t.elapsed() < limit {
            if f(&self.text()) {
                return true;
            }
            if !self.running() {
                return f(&self.text());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

/// `SIGKILL` (Linux: 9, the same on every architecture).
const SIGKILL: i32 = 9;

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill(SIGKILL);
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_killed_whole_at_the_limit() {
        let mut c = Command::new("sh");
        c.args(["-c", "sleep 30 & echo started; wait"]);
        let mut p = Proc::spawn(c, "softrdma-testkit-out", "group", true);
        assert!(p.wait_for("started", Duration::from_secs(10)));
        let d = p.wait(Duration::from_millis(200));
        assert_eq!(d.status, None);
        assert!(d.out.contains("started"));
        assert!(!d.ok());
    }

    #[test]
    fn an_exit_code_is_reported() {
        let mut c = Command::new("sh");
        c.args(["-c", "echo hi; exit 3"]);
        let d = Proc::spawn(c, "softrdma-testkit-out", "code", false).wait(Duration::from_secs(10));
        assert_eq!(d.status, Some(3));
        assert_eq!(d.out, "hi\n");
    }
}
