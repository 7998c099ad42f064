//! What Nave's tests share, so each test reads as what it checks:
//!
//! - [`wait_for`]: poll a condition until it holds or a deadline passes, then fail with what was
//!   expected and the last thing seen (never a fixed sleep);
//! - [`FakeAgent`]: an agent speaking the hub's wire protocol over HTTP (register, heartbeat,
//!   work, status), so a test controls exactly what the hub hears; [`capacity`] builds the
//!   capacity model it reports;
//! - [`Mcd`]: a MultiClusterDeployment fixture builder;
//! - [`TestPki`]: a CA and a serving certificate for the hub's HTTPS.
//!
//! ```text
//!   test ── Mcd::new("web")...build() ──> management cluster ──> hub
//!   test ── FakeAgent::join(..) / heartbeat / work / report ──> hub's /agent/v1
//!   test ── wait_for("what", DEADLINE, || check) ──> Ok(seen) or a panic naming the last seen
//! ```
//!
//! It depends on `nave-api` only (no hub, no agent), so the hub's and the agent's own tests can
//! use it.

#![forbid(unsafe_code)]

mod agent;
mod mcd;
mod pki;
mod ports;
mod wait;

pub use agent::{BOOTSTRAP, FakeAgent, all_ready, capacity, idle_capacity, ready_deployment};
pub use mcd::Mcd;
pub use pki::TestPki;
pub use ports::{free_loopback_port, free_loopback_ports};
pub use wait::{DEADLINE, try_wait_for, wait_for};
