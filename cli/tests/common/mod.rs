//! What the virtual-clock harnesses share.
// Each test crate uses a part of it.
#![allow(dead_code)]

/// One millisecond in ns.
pub const MS: u64 = 1_000_000;
/// One second in ns.
pub const SEC: u64 = 1_000 * MS;

/// splitmix64: a harness's only randomness, seeded, so every run is the same.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in (0, 1).
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Exponential, mean `mean_ns`.
    pub fn exp_ns(&mut self, mean_ns: f64) -> u64 {
        (-self.unit().ln() * mean_ns) as u64
    }

    /// Lognormal with mean `mean_ms` and shape `sigma`, in ns.
    pub fn lognormal_ns(&mut self, mean_ms: f64, sigma: f64) -> u64 {
        let normal = (-2.0 * self.unit().ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos();
        let mu = mean_ms.ln() - sigma * sigma / 2.0;
        ((mu + sigma * normal).exp() * MS as f64) as u64
    }
}
