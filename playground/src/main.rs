//! `nave-sim`: see the library documentation.

#![forbid(unsafe_code)]

use clap::Parser;

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    nave_sim::cluster::install_crypto_provider();
    let cli = nave_playground::cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| cli.default_log_filter().into()),
        )
        .with_writer(std::io::stderr)
        .init();
    nave_playground::cli::run(cli).await
}
