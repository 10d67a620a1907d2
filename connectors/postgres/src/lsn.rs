//! PostgreSQL log sequence numbers (`pg_lsn`): a 64-bit WAL position, written `X/Y` in hex.
//!
//! Invariant: [`Lsn`] is a plain ordered `u64`; `Lsn(0)` is the "invalid" position
//! (`0/0`), which `START_REPLICATION` reads as "start from the slot's confirmed position".

use std::fmt;
use std::str::FromStr;

/// A WAL position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    pub const INVALID: Lsn = Lsn(0);

    pub fn is_valid(self) -> bool {
        self.0 != 0
    }

    /// The position as a signed Java long, as Debezium stores it in offsets and events.
    pub fn as_i64(self) -> i64 {
        i64::from_ne_bytes(self.0.to_ne_bytes())
    }

    /// The inverse of [`Lsn::as_i64`].
    pub fn from_i64(v: i64) -> Lsn {
        Lsn(u64::from_ne_bytes(v.to_ne_bytes()))
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

/// Why an `X/Y` text did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid LSN {0:?}: expected two hex numbers separated by '/'")]
pub struct LsnParseError(pub String);

impl FromStr for Lsn {
    type Err = LsnParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || LsnParseError(s.to_owned());
        let (hi, lo) = s.trim().split_once('/').ok_or_else(bad)?;
        if hi.is_empty() || lo.is_empty() || hi.len() > 8 || lo.len() > 8 {
            return Err(bad());
        }
        let hi = u64::from_str_radix(hi, 16).map_err(|_| bad())?;
        let lo = u64::from_str_radix(lo, 16).map_err(|_| bad())?;
        Ok(Lsn((hi << 32) | lo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_roundtrip_and_order() {
        let l: Lsn = "16/B374D848".parse().unwrap();
        assert_eq!(l.0, 0x16_B374_D848);
        assert_eq!(l.to_string(), "16/B374D848");
        assert_eq!("0/0".parse::<Lsn>().unwrap(), Lsn::INVALID);
        assert!("0/1".parse::<Lsn>().unwrap() > Lsn::INVALID);
        for bad in ["", "1", "/1", "1/", "x/1", "1/2/3", "123456789/0"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
        assert_eq!(Lsn::from_i64(Lsn(u64::MAX).as_i64()), Lsn(u64::MAX));
        assert_eq!(Lsn(31206400).as_i64(), 31206400);
    }
}
