//! `kubectl-nave`: `nave` under the name kubectl runs as the plugin `kubectl nave`.
#![forbid(unsafe_code)]

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

fn main() -> std::process::ExitCode {
    nave_cli::main()
}
