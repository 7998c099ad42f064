//! `nave-agent`: see the library documentation.
#![forbid(unsafe_code)]

use clap::Parser;

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    nave_runtime::install_crypto_provider();
    nave_agent::run(nave_agent::Args::parse()).await
}
