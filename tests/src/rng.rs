//! A tiny deterministic PRNG (xorshift64*) for randomised tests: a failure can be replayed
//! from the seed the test printed. Not for anything that needs real randomness.

pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value; zero is mapped to a non-zero state).
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
