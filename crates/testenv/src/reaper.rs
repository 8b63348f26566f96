//! The reaper: a small `sh` process per environment that stops the plane when the test process
//! is gone, however it went (normal exit with the shared environment still in its `static`,
//! `panic = "abort"`, a signal, `kill -9`).
//!
//! The components run detached in process groups of their own (so that Ctrl-C in the terminal
//! does not kill them half-way through a graceful stop), which also means nothing kills them
//! when the test process dies. The reaper closes that gap without `unsafe` or signal handlers:
//! its standard input is a pipe whose only writer is the test process. When that process
//! exits, the kernel closes the pipe, the reaper's `cat` sees end-of-file, and the reaper
//! SIGKILLs the process group of every pid file in the plane's `run/` directory and removes
//! the plane's directory. The reaper ignores SIGINT, SIGTERM and SIGHUP and runs in a process
//! group of its own, so a Ctrl-C aimed at `cargo test` does not take it down first.
//!
//! The directory is kept when it holds [`KEEP_MARKER`] (written when a test panicked or the
//! start failed, so that the components' logs can be read).
//!
//! A plane stopped in the ordinary way ([`TestEnv`](crate::TestEnv)'s `Drop`) has no pid files
//! left, so the reaper then only removes what remains of the directory.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::Error;

/// The file in a plane's directory that tells the reaper to leave the directory in place.
pub(crate) const KEEP_MARKER: &str = ".kctrl-testenv-keep";

/// The reaper's script: `$1` is the run directory, `$2` the plane's directory, `$3` the name
/// of the file whose presence in it keeps the directory.
const SCRIPT: &str = r#"trap '' INT TERM HUP
cat >/dev/null
for f in "$1"/*.pid; do
  [ -f "$f" ] || continue
  read -r pid rest < "$f"
  case "$pid" in ''|*[!0-9]*) continue ;; esac
  # kill(1), not dash's builtin, which takes no process group after `--`.
  env kill -KILL -- "-$pid" 2>/dev/null || env kill -KILL "$pid" 2>/dev/null
done
[ -e "$2/$3" ] || rm -rf -- "$2"
"#;

/// A running reaper; dropping it (or the test process exiting) makes it act.
#[derive(Debug)]
pub(crate) struct Reaper {
    stdin: Option<ChildStdin>,
    child: Child,
}

impl Reaper {
    /// Starts the reaper of the plane in `dir` (pid files in `run_dir`).
    pub(crate) fn spawn(run_dir: &Path, dir: &Path) -> Result<Reaper, Error> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(SCRIPT)
            .arg("kctrl-testenv-reaper")
            .arg(run_dir)
            .arg(dir)
            .arg(KEEP_MARKER)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|source| Error::Io {
                context: "starting the clean-up process (sh)".into(),
                source,
            })?;
        Ok(Reaper {
            stdin: child.stdin.take(),
            child,
        })
    }

    /// Makes the reaper act now and waits until it has (used after a stop, so the directory
    /// is gone when the environment's drop returns).
    pub(crate) fn finish(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_the_recorded_process_groups_and_removes_the_directory_when_its_pipe_closes() {
        let dir = std::env::temp_dir().join(format!("kctrl-testenv-reaper-{}", std::process::id()));
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        let mut sleeper = Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap();
        std::fs::write(run.join("a.pid"), format!("{} 123\n", sleeper.id())).unwrap();
        std::fs::write(run.join("junk.pid"), "not-a-pid\n").unwrap();
        let reaper = Reaper::spawn(&run, &dir).unwrap();
        // Still running while the pipe is open.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(sleeper.try_wait().unwrap().is_none());
        reaper.finish();
        let status = sleeper.wait().unwrap();
        assert!(!status.success(), "{status}");
        assert!(!dir.exists());
    }

    #[test]
    fn keeps_the_directory_when_it_holds_the_marker() {
        let dir = std::env::temp_dir().join(format!("kctrl-testenv-keep-{}", std::process::id()));
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(dir.join(KEEP_MARKER), "").unwrap();
        Reaper::spawn(&run, &dir).unwrap().finish();
        assert!(dir.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
