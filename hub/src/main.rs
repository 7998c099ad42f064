//! `nave-hub`: see the library for what it does.
#![forbid(unsafe_code)]

use clap::Parser;
use nave_hub::cli::{Cli, Command};

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    nave_runtime::install_crypto_provider();
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => {
            print!("{}", nave_hub::crds_yaml());
            Ok(())
        }
        Command::Admin(admin) => match nave_hub::admin_cli::run(&admin).await {
            Ok(answer) => {
                println!("{answer}");
                Ok(())
            }
            Err(error) => {
                eprintln!("nave-hub admin: {error}");
                std::process::exit(1);
            }
        },
        Command::Run(run) => {
            nave_runtime::init_tracing(run.log_json);
            nave_hub::run(run).await?;
            Ok(())
        }
    }
}
