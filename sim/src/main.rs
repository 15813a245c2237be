//! The `faultline` command.

fn main() -> std::process::ExitCode {
    faultline_sim::cli::main()
}
