//! Direct-I/O probes: profiles, targets, engines and results.

pub mod cli;
