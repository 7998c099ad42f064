//! `nave`: see the library for what it does.
#![forbid(unsafe_code)]

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

fn main() -> std::process::ExitCode {
    nave_cli::main()
}
