//! A real HTTP server on loopback between a remote's client and the S3 server, which
//! answers `503 Service Unavailable` to the reads of chosen paths while it is told to, and
//! passes everything else through: a server that fails for some files and not others, as
//! a volume server down does, but at a moment the test chooses.
//!
//! One request per connection: each request goes to the S3 server on a connection of its
//! own with `Connection: close`, and its answer comes back verbatim before the client's
//! connection is closed (the client opens another for its next request).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub struct FaultyProxy {
    port: u16,
    state: Arc<State>,
}

struct State {
    upstream: String,
    /// Reads (GET) of paths holding this part fail while `failing` is set.
    failing_part: Mutex<String>,
    failing: AtomicBool,
    /// Reads of those paths still to fail, while `failing` is not set.
    fail_next: AtomicU64,
    /// Reads that were failed.
    failed: AtomicU64,
}

impl FaultyProxy {
    /// Starts a proxy in front of the S3 server at `upstream` (`http://host:port`).
    pub fn start(upstream: &str) -> FaultyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
        let port = listener.local_addr().expect("a bound port").port();
        let state = Arc::new(State {
            upstream: upstream.trim_start_matches("http://").to_string(),
            failing_part: Mutex::new(String::new()),
            failing: AtomicBool::new(false),
            fail_next: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        let shared = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let state = shared.clone();
                std::thread::spawn(move || {
                    let _ = serve(conn, &state);
                });
            }
        });
        FaultyProxy { port, state }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// From now on, reads of paths holding `part` (e.g. `/indexes/`) fail.
    pub fn fail_reads_of(&self, part: &str) {
        *self.state.failing_part.lock().unwrap() = part.to_string();
        self.state.failing.store(true, Ordering::SeqCst);
    }

    /// The next `n` reads of paths holding `part` fail, then they pass.
    pub fn fail_next_reads_of(&self, part: &str, n: u64) {
        *self.state.failing_part.lock().unwrap() = part.to_string();
        self.state.fail_next.store(n, Ordering::SeqCst);
    }

    /// From now on, everything passes.
    pub fn heal(&self) {
        self.state.failing.store(false, Ordering::SeqCst);
        self.state.fail_next.store(0, Ordering::SeqCst);
    }

    /// Reads failed so far.
    pub fn failed(&self) -> u64 {
        self.state.failed.load(Ordering::SeqCst)
    }
}

fn serve(client: TcpStream, state: &State) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut head = Vec::new();
    let mut content_length = 0usize;
    let mut request_line = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if request_line.is_empty() {
            request_line = line.clone();
            head.extend_from_slice(line.as_bytes());
            continue;
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(n) = lower.strip_prefix("content-length:") {
            content_length = n.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("connection:") {
            continue;
        }
        head.extend_from_slice(line.as_bytes());
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body)?;
    let mut client = client;
    let mut words = request_line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let fails = || {
        state.failing.load(Ordering::SeqCst)
            || state
                .fail_next
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
    };
    if method == "GET" && path.contains(state.failing_part.lock().unwrap().as_str()) && fails() {
        state.failed.fetch_add(1, Ordering::SeqCst);
        client.write_all(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?;
        return client.flush();
    }
    let mut upstream = TcpStream::connect(&state.upstream)?;
    upstream.write_all(&head)?;
    upstream.write_all(&body)?;
    std::io::copy(&mut upstream, &mut client)?;
    client.flush()
}
