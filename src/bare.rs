//! The scheduler core with no feature plugged into its seam (`NoHooks`): the plain scheduler.
//! Benches price the features against it (`fairq_core` beside `fairq_lean` and `fairq`), and a
//! test holds it to the same shares as the engine. Not part of the API.

use crate::config::Config;
use crate::core::{Core, NoHooks};
use crate::identity::TenantKey;
use crate::types::{
    Completion, ConfigError, Enqueued, Error, NextGrant, Outcome, Reason, Request, Ticket,
};

/// The core alone: enqueue, grant, complete and weights, no indicators, policies or bulkheads.
#[doc(hidden)]
pub struct BareCore {
    core: Core<NoHooks>,
}

impl BareCore {
    /// Builds the core from a validated config; the feature settings in it are ignored.
    pub fn new(config: Config) -> Result<BareCore, ConfigError> {
        config.validate()?;
        Ok(BareCore {
            core: Core::new(config.core_limits(), NoHooks),
        })
    }

    /// As `Engine::set_weight_key`.
    pub fn set_weight_key(&self, key: TenantKey, weight: u32) -> Result<(), Error> {
        self.core.set_weight_key(key, weight)
    }

    /// As `Engine::enqueue_at`, always enabled.
    pub fn enqueue_at(&self, request: &Request, now: u64) -> Result<Enqueued, Error> {
        self.core.check_request(request)?;
        match request.tenant {
            Some(key) => self.core.enqueue(key, request, now),
            None => Ok(self.core.refuse_on_arrival(Reason::NoTenant, 0)),
        }
    }

    /// As `Engine::next_grant_at`.
    pub fn next_grant_at(&self, now: u64) -> NextGrant {
        self.core.next_grant(now)
    }

    /// As `Engine::complete_at`.
    pub fn complete_at(
        &self,
        ticket: Ticket,
        outcome: Outcome,
        actual_cost: Option<u32>,
        now: u64,
    ) -> Result<Completion, Error> {
        self.core.complete(ticket, outcome, actual_cost, now)
    }
}
