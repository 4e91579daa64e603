//! fairq as an Envoy dynamic module: an HTTP filter that admits each tenant's requests to the
//! upstream by weight, through one engine shared by every worker thread of the Envoy process.
//!
//! Envoy loads `libfairq_envoy.so` and calls the `envoy_dynamic_module_on_*` hooks below. A
//! request that cannot proceed at once is paused on its worker and resumed there when any worker
//! (or the deadline thread) hands it a grant; see `admission` for the hand-over and `filter` for
//! the stream's side. The configuration is the JSON `filter_config`; see `config`.

// The Envoy side links against symbols only Envoy exports, so the unit tests (which run
// without Envoy) cover the configuration and the hand-over, and test_envoy.py the rest.
#[cfg(not(test))]
mod abi;
mod admission;
mod config;
#[cfg(not(test))]
mod filter;
#[cfg(not(test))]
mod hooks;
#[cfg(not(test))]
mod stats;
mod status;
