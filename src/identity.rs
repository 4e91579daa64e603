//! Who a request belongs to: refusal dimensions, tenant keys and the identity resolver.
//!
//! The engine never stores a raw identifier: a tenant is known by a 64-bit hash
//! (XXH3-64, see [`TenantKey::from_raw`]).
//! Weights are also looked up by that hash, so the raw id is used only to compute it.

/// The limiter dimension that refused a request. Only tenant dimensions are queueable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Dimension {
    /// Per-user limit (queueable).
    User = 0,
    /// Per-API-key limit (queueable).
    ApiKey = 1,
    /// Per-team limit (queueable).
    Team = 2,
    /// Per-model limit (queueable).
    Model = 3,
    /// Global limit: no tenant yet, refused at once.
    Global = 4,
    /// Per-client (pre-auth) limit: refused at once.
    Client = 5,
    /// Per-backend candidate filter: never reaches the queue.
    Backend = 6,
    /// Store failure (fail-closed 503): refused at once.
    Store = 7,
}

impl Dimension {
    /// Every dimension, in code order.
    pub const ALL: [Dimension; 8] = [
        Dimension::User,
        Dimension::ApiKey,
        Dimension::Team,
        Dimension::Model,
        Dimension::Global,
        Dimension::Client,
        Dimension::Backend,
        Dimension::Store,
    ];

    /// True for the dimensions whose refusals are held in a tenant queue.
    pub fn is_queueable(self) -> bool {
        matches!(
            self,
            Dimension::User | Dimension::ApiKey | Dimension::Team | Dimension::Model
        )
    }

    /// The dimension with this code, if any.
    pub fn from_code(code: u32) -> Option<Dimension> {
        Dimension::ALL.get(code as usize).copied()
    }

    /// Snake-case name, as used in metrics and error details.
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::User => "user",
            Dimension::ApiKey => "api_key",
            Dimension::Team => "team",
            Dimension::Model => "model",
            Dimension::Global => "global",
            Dimension::Client => "client",
            Dimension::Backend => "backend",
            Dimension::Store => "store",
        }
    }
}

/// Which identifier keys the tenant queues and weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
pub enum TenantDimension {
    /// The user id (default).
    #[default]
    User = 0,
    /// The API key's stable, non-secret identifier.
    ApiKey = 1,
    /// The team id.
    Team = 2,
}

impl TenantDimension {
    /// The tenant dimension with this code, if any.
    pub fn from_code(code: u32) -> Option<TenantDimension> {
        match code {
            0 => Some(TenantDimension::User),
            1 => Some(TenantDimension::ApiKey),
            2 => Some(TenantDimension::Team),
            _ => None,
        }
    }

    /// Snake-case name, the `tenant_dimension` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            TenantDimension::User => "user",
            TenantDimension::ApiKey => "api_key",
            TenantDimension::Team => "team",
        }
    }
}

/// A tenant, known by a 64-bit hash of its raw identifier. Never 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantKey(u64);

impl TenantKey {
    /// Hashes a raw identifier. The raw value is not kept.
    ///
    /// The key leaves the process (fleet mode's Redis fields, the metrics' `tenant` label), so it
    /// is a specified function, the same on every build, CPU and binding: **XXH3-64 with seed 0
    /// over the raw bytes, 0 mapped to 1** (the `xxhash-rust` crate). Test vectors:
    ///
    /// | raw identifier | key |
    /// |---|---|
    /// | `""` (empty) | `0x2d06800538d394c2` |
    /// | `"acme"` | `0x44ad98655d8858e1` |
    /// | `"0123456789abcdef"` × 64 (1 KiB) | `0x540ffccbf24ea528` |
    /// | `"naïve-租户"` (UTF-8, 13 bytes) | `0xd812649601f883b6` |
    ///
    /// `xxhsum -H3` (Debian package `xxhash`) prints the same values for the same bytes.
    pub fn from_raw(raw: &[u8]) -> TenantKey {
        TenantKey::from_hash(xxhash_rust::xxh3::xxh3_64(raw))
    }

    /// Wraps an existing hash (0 is mapped to 1: 0 marks an unused slot).
    pub fn from_hash(hash: u64) -> TenantKey {
        TenantKey(hash.max(1))
    }

    /// The hash value.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// The identifiers a request carries. Absent or empty means "not present".
#[derive(Clone, Copy, Debug, Default)]
pub struct Identity<'a> {
    /// User id.
    pub user: Option<&'a str>,
    /// Team id.
    pub team: Option<&'a str>,
    /// True when `team` is the placeholder a key without a team carries: it is not an identifier.
    pub team_is_placeholder: bool,
    /// The API key's stable identifier.
    pub api_key: Option<&'a str>,
}

impl<'a> Identity<'a> {
    fn present(value: Option<&'a str>) -> Option<&'a str> {
        value.filter(|v| !v.is_empty())
    }

    fn get(&self, dim: TenantDimension) -> Option<&'a str> {
        match dim {
            TenantDimension::User => Self::present(self.user),
            TenantDimension::Team if self.team_is_placeholder => None,
            TenantDimension::Team => Self::present(self.team),
            TenantDimension::ApiKey => Self::present(self.api_key),
        }
    }

    /// Resolves the tenant: the configured dimension first, then user, team, api_key.
    /// Returns the dimension used and the key, or `None` when the request has no identifier.
    pub fn resolve(&self, preferred: TenantDimension) -> Option<(TenantDimension, TenantKey)> {
        [
            preferred,
            TenantDimension::User,
            TenantDimension::Team,
            TenantDimension::ApiKey,
        ]
        .into_iter()
        .find_map(|dim| {
            self.get(dim)
                .map(|raw| (dim, TenantKey::from_raw(raw.as_bytes())))
        })
    }
}
