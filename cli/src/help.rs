//! What every command's `--help` shares, for each command's clap `Args` to name without
//! importing the command line that gathers them (`args`).

/// Every command's help: its usage, what it does, its flags, then the rest.
pub const TEMPLATE: &str = "{usage-heading} {usage}\n\n{before-help}{all-args}{after-help}";
