//! Every version of every event of a scenario's namespace, from `kubectl get events --watch`.
//!
//! A snapshot of the events misses messages: once an event recorder has seen ten different
//! messages of one kind for one object, it folds the next new ones into a single aggregate
//! event (`(combined from similar events): …`) whose message each repeat overwrites, and which
//! messages it still lets through on their own is random (the recorder forgets one of the ten
//! at random, upstream's and ours alike). A snapshot then shows a random part of what was said.
//! A watch sees each create and each patch of an event, so the union of the messages it saw is
//! every message the controller emitted, whichever object carried it.

use std::io::BufReader;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

/// A running `kubectl get events --watch -o json` and the event versions it printed so far.
pub(crate) struct EventWatch {
    seen: Arc<Mutex<Vec<Value>>>,
    stop: Arc<AtomicBool>,
    child: Arc<Mutex<Option<Child>>>,
    reader: Option<JoinHandle<()>>,
}

impl EventWatch {
    /// Starts watching the events of `ns` (its current ones first, then every change). A
    /// watch the server ends is started again; versions seen twice do no harm, as only which
    /// messages were seen counts.
    pub(crate) fn start(kubectl: PathBuf, kubeconfig: PathBuf, ns: &str) -> Result<EventWatch> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let child: Arc<Mutex<Option<Child>>> = Arc::new(Mutex::new(None));
        let spawn = {
            let ns = ns.to_owned();
            move || {
                Command::new(&kubectl)
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["-n", &ns, "get", "events", "--watch", "-o", "json"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
            }
        };
        let first = spawn().context("starting kubectl get events --watch")?;
        *child.lock().unwrap_or_else(|e| e.into_inner()) = Some(first);
        let reader = {
            let (seen, stop, child) = (seen.clone(), stop.clone(), child.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let stdout = child
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .as_mut()
                        .and_then(|c| c.stdout.take());
                    if let Some(out) = stdout {
                        let stream = serde_json::Deserializer::from_reader(BufReader::new(out))
                            .into_iter::<Value>();
                        for value in stream {
                            let Ok(event) = value else { break };
                            seen.lock().unwrap_or_else(|e| e.into_inner()).push(event);
                        }
                    }
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    // The watch ended (the server closes watches after a while): start again.
                    thread::sleep(Duration::from_millis(200));
                    let mut slot = child.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(mut old) = slot.take() {
                        let _ = old.kill();
                        let _ = old.wait();
                    }
                    // Checked under the lock that `drop` takes after setting `stop`, so no
                    // watch starts after the last one was killed.
                    if !stop.load(Ordering::SeqCst) {
                        *slot = spawn().ok();
                    }
                }
            })
        };
        Ok(EventWatch {
            seen,
            stop,
            child,
            reader: Some(reader),
        })
    }

    /// Every event version printed so far.
    pub(crate) fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for EventWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(mut c) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
