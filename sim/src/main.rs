//! `nave-sim`: see the library documentation.

#![forbid(unsafe_code)]

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    nave_sim::cluster::install_crypto_provider();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    nave_sim::cli::run(nave_sim::cli::Cli::parse()).await
}
