//! `nave-hub`: see the library for what it does.
#![forbid(unsafe_code)]

use clap::Parser;
use nave_hub::cli::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    nave_runtime::install_crypto_provider();
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => {
            print!("{}", nave_hub::crds_yaml());
            Ok(())
        }
        Command::Run(run) => {
            nave_runtime::init_tracing(run.log_json);
            nave_hub::run(run).await?;
            Ok(())
        }
    }
}
