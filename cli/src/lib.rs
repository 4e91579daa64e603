//! The library part of the `fairq` command: the scenario file parser.
//!
//! The command (`src/main.rs`) uses it, and the fuzz targets (`fuzz/`) drive it with arbitrary
//! input; built without default features it needs only `serde`, `toml` and `fairq`.

pub mod scenario;
