//! A local release mirror for the download tests: a tiny HTTP/1.1 server on 127.0.0.1
//! (one request per connection) serving files from memory, which can honour or ignore `Range`
//! and drop the connection part-way through a body, and which records every request.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// How the mirror serves one path.
#[derive(Clone, Debug, Default)]
pub(crate) struct Behaviour {
    /// Answer `Range: bytes=N-` with 206 and the rest (else 200 and the whole file).
    pub(crate) honour_range: bool,
    /// For this many more requests, close the connection after sending this many body
    /// bytes (the headers announce the full length).
    pub(crate) drop_after: Option<(usize, u32)>,
    /// Answer a range with at most this many bytes (a correct 206 for a shorter range).
    pub(crate) max_range_len: Option<usize>,
    /// Send no `Content-Length`: the body ends where the connection closes.
    pub(crate) no_length: bool,
}

#[derive(Default)]
struct State {
    files: HashMap<String, Vec<u8>>,
    behaviours: HashMap<String, Behaviour>,
    /// `(path, Range header)` of every request, in order.
    requests: Vec<(String, Option<String>)>,
}

/// The running mirror; stopped when dropped.
pub(crate) struct Mirror {
    pub(crate) url: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    addr: std::net::SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl Mirror {
    pub(crate) fn start() -> Mirror {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(conn) = conn {
                        let state = Arc::clone(&state);
                        std::thread::spawn(move || serve(conn, &state));
                    }
                }
            })
        };
        Mirror {
            url: format!("http://{addr}"),
            state,
            stop,
            addr,
            thread: Some(thread),
        }
    }

    pub(crate) fn put(&self, path: &str, body: impl Into<Vec<u8>>) {
        let mut s = self.state.lock().unwrap();
        s.files.insert(path.to_owned(), body.into());
    }

    pub(crate) fn behave(&self, path: &str, behaviour: Behaviour) {
        let mut s = self.state.lock().unwrap();
        s.behaviours.insert(path.to_owned(), behaviour);
    }

    /// The requests for `path` so far: the `Range` header of each.
    pub(crate) fn requests(&self, path: &str) -> Vec<Option<String>> {
        let s = self.state.lock().unwrap();
        s.requests
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
            .collect()
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(conn: TcpStream, state: &Mutex<State>) {
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_owned();
    let mut range = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("range")
        {
            range = Some(v.trim().to_owned());
        }
    }
    let (body, behaviour) = {
        let mut s = state.lock().unwrap();
        s.requests.push((path.clone(), range.clone()));
        let body = s.files.get(&path).cloned();
        let behaviour = s.behaviours.get(&path).cloned().unwrap_or_default();
        if let Some((bytes, n)) = behaviour.drop_after
            && n > 0
        {
            let left = n - 1;
            s.behaviours.get_mut(&path).expect("present").drop_after =
                (left > 0).then_some((bytes, left));
        }
        (body, behaviour)
    };
    let mut out = conn;
    let Some(body) = body else {
        let _ = out.write_all(
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\nconnection: close\r\n\r\nnot found",
        );
        return;
    };
    let from = range
        .as_deref()
        .filter(|_| behaviour.honour_range)
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok());
    let head = match from {
        Some(from) if from >= body.len() => {
            let _ = out.write_all(
                format!(
                    "HTTP/1.1 416 Range Not Satisfiable\r\ncontent-range: bytes */{}\r\n\
                     content-length: 0\r\nconnection: close\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            return;
        }
        Some(from) => {
            let len = behaviour
                .max_range_len
                .map_or(body.len() - from, |m| m.min(body.len() - from));
            format!(
                "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes {from}-{}/{}\r\n\
                 content-length: {len}\r\nconnection: close\r\n\r\n",
                from + len - 1,
                body.len(),
            )
        }
        None if behaviour.no_length => "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_owned(),
        None => format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        ),
    };
    let end = match from {
        Some(from) => behaviour
            .max_range_len
            .map_or(body.len(), |m| (from + m).min(body.len())),
        None => body.len(),
    };
    let part = &body[from.unwrap_or(0)..end];
    let _ = out.write_all(head.as_bytes());
    match behaviour.drop_after {
        Some((bytes, n)) if n > 0 => {
            let _ = out.write_all(&part[..bytes.min(part.len())]);
            let _ = out.flush();
            let _ = out.shutdown(Shutdown::Both);
        }
        _ => {
            let _ = out.write_all(part);
        }
    }
}
