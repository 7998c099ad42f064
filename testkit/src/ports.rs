//! Loopback ports for servers that take an address rather than a listener (the hub binds what it
//! is told, and binds it again after a restart).
//!
//! A port found by binding port 0 and letting go is a port the kernel hands out again: another
//! test of the same binary binding port 0 meanwhile (a simulated API server, a client's socket)
//! can take it before the server binds it, and the server then fails to start, or a client talks
//! to the wrong server. These ports come from below the kernel's ephemeral range (32768 and up
//! on Linux), which binding port 0 never returns, and a counter keeps the tests of one binary
//! from choosing the same one; each is checked free when chosen.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// Where the ports start, and how many there are to choose from.
const FIRST: u32 = 20_000;
const COUNT: u32 = 12_000;

/// `n` distinct loopback addresses whose ports no listener held when chosen, and that no other
/// caller in this process is given.
pub fn free_loopback_ports(n: usize) -> std::io::Result<Vec<SocketAddr>> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Test binaries run one after another, but a spread per process keeps two that overlap
    // (two checkouts on one machine) apart most of the time.
    let offset = (std::process::id() % 600) * 20;
    let mut chosen = Vec::with_capacity(n);
    for _ in 0..COUNT {
        if chosen.len() == n {
            break;
        }
        let port = FIRST + (offset + NEXT.fetch_add(1, Ordering::Relaxed)) % COUNT;
        let addr = SocketAddr::from(([127, 0, 0, 1], u16::try_from(port).unwrap_or_default()));
        if TcpListener::bind(addr).is_ok() {
            chosen.push(addr);
        }
    }
    if chosen.len() < n {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("{n} free loopback ports asked, {} found", chosen.len()),
        ));
    }
    Ok(chosen)
}

/// One loopback address as [`free_loopback_ports`] chooses them.
pub fn free_loopback_port() -> std::io::Result<SocketAddr> {
    free_loopback_ports(1).map(|mut ports| ports.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_outside_the_ephemeral_range() {
        let ports = free_loopback_ports(50).unwrap();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), 50, "distinct ports: {ports:?}");
        for addr in &ports {
            assert!(addr.port() < 32_768, "{addr} is below the ephemeral range");
            TcpListener::bind(addr).unwrap_or_else(|e| panic!("{addr} is free: {e}"));
        }
        let more = free_loopback_port().unwrap();
        assert!(!ports.contains(&more), "a later call gives another port");
    }
}
