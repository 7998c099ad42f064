//! Hubs and agents as processes of their own, for the tests and benchmarks that kill, pause and
//! cut them: the calling binary runs itself again with `role hub ...` or `role agent ...` (the
//! same arguments as `nave-hub` and `nave-agent`), so the children run exactly the code the real
//! binaries run, built with the test.
//!
//! ```text
//!   test process: simulated clusters, the TCP proxies, the checks
//!      ├─ child: role hub run --leader-elect ...   (SIGKILL, SIGSTOP/SIGCONT, restart)
//!      ├─ child: role hub run --leader-elect ...
//!      └─ child: role agent --hub-url https://<hub proxy> ...
//!   agents ──► hub proxy (one address, like a Service) ──► whichever hubs accept
//!   hubs ────► store proxy (cut on demand) ──► Postgres
//! ```
//!
//! A binary that uses this calls [`child_role`] first in its `main`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use clap::Parser as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Runs the hub or agent this process was started as, if it was (`role hub|agent ...` among its
/// arguments), and answers how that went; `None` for the binary's own run.
pub fn child_role() -> Option<anyhow::Result<()>> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == "role")?;
    Some(run_child(&args[i + 1..]))
}

fn run_child(args: &[String]) -> anyhow::Result<()> {
    nave_sim::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match args.first().map(String::as_str) {
        Some("hub") => {
            let cli = nave_hub::cli::Cli::parse_from(
                std::iter::once("nave-hub".to_owned()).chain(args[1..].iter().cloned()),
            );
            let nave_hub::cli::Command::Run(run) = cli.command else {
                anyhow::bail!("the hub role takes `run ...`");
            };
            nave_runtime::init_tracing(run.log_json);
            runtime.block_on(nave_hub::run(run))?;
        }
        Some("agent") => {
            let parsed = nave_agent::Args::parse_from(
                std::iter::once("nave-agent".to_owned()).chain(args[1..].iter().cloned()),
            );
            runtime.block_on(nave_agent::run(parsed))?;
        }
        other => anyhow::bail!("unknown role {other:?}"),
    }
    Ok(())
}

/// A hub or an agent in a process of its own, its log in a file.
#[derive(Debug)]
pub struct Proc {
    /// What it is, for messages (`hub-1`, `agent eu-west-1`).
    pub name: String,
    child: Child,
    /// Its log (standard error).
    pub log: PathBuf,
}

impl Proc {
    /// Starts this binary again as `role`, logging to `dir/<log>` (appended: a restarted part
    /// keeps one log).
    pub fn spawn(name: &str, role: &[String], dir: &Path, log: &str, rust_log: &str) -> anyhow::Result<Proc> {
        let exe = std::env::current_exe()?;
        let path = dir.join(log);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let child = Command::new(exe)
            .arg("role")
            .args(role)
            .env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Proc {
            name: name.to_owned(),
            child,
            log: path,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGSTOP: it stops where it is, its sockets open, as a process the kernel does not
    /// schedule (a long pause, a frozen VM).
    pub fn pause(&self) -> anyhow::Result<()> {
        self.signal(rustix::process::Signal::STOP)
    }

    /// SIGCONT: it goes on from where it stopped.
    pub fn resume(&self) -> anyhow::Result<()> {
        self.signal(rustix::process::Signal::CONT)
    }

    fn signal(&self, signal: rustix::process::Signal) -> anyhow::Result<()> {
        let pid =
            rustix::process::Pid::from_raw(i32::try_from(self.pid())?).context("a process id is never 0")?;
        rustix::process::kill_process(pid, signal).with_context(|| format!("signalling {}", self.name))
    }

    /// How it ended, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of its log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A paused process would ignore SIGKILL only until resumed; kill works on stopped ones.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP proxy: one address in front of several upstreams, each connection to the first that
/// accepts it (in turn), as a Service in front of replicas; or cut, closing every connection and
/// refusing new ones, as a network partition does.
#[derive(Debug, Clone)]
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    upstreams: Arc<Mutex<Vec<SocketAddr>>>,
    cut: Arc<AtomicBool>,
    next: Arc<AtomicUsize>,
    connections: Arc<Mutex<JoinSet<()>>>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port in front of `upstreams`.
    pub async fn start(upstreams: Vec<SocketAddr>) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy = Proxy {
            addr: listener.local_addr()?,
            upstreams: Arc::new(Mutex::new(upstreams)),
            cut: Arc::default(),
            next: Arc::default(),
            connections: Arc::new(Mutex::new(JoinSet::new())),
        };
        let accepting = proxy.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if accepting.cut.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let proxy = accepting.clone();
                accepting
                    .connections
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .spawn(async move { proxy.relay(client).await });
            }
        });
        Ok(proxy)
    }

    async fn relay(&self, mut client: TcpStream) {
        let upstreams = self.upstreams.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if upstreams.is_empty() {
            return;
        }
        let first = self.next.fetch_add(1, Ordering::SeqCst);
        for i in 0..upstreams.len() {
            let target = upstreams[(first + i) % upstreams.len()];
            if let Ok(mut upstream) = TcpStream::connect(target).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                return;
            }
        }
    }

    /// Closes every connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .abort_all();
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// A free loopback address (bound, then released for the child to bind).
pub fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}
