//! Configuration pieces every Debezium-compatible source shares: `skipped.operations` and the
//! include/exclude pair rule.
//!
//! Invariant: parsing accepts exactly Debezium's vocabulary and says what is wrong otherwise.

use headwater_api::{ConfigValidation, Properties};

/// Operations that can be skipped (`skipped.operations`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkippedOps {
    pub create: bool,
    pub update: bool,
    pub delete: bool,
    pub truncate: bool,
}

/// Parses `skipped.operations`: a comma list of `c`, `u`, `d`, `t`, or `none`.
pub fn parse_skipped(s: &str) -> Result<SkippedOps, String> {
    let mut ops = SkippedOps::default();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.to_ascii_lowercase().as_str() {
            "c" => ops.create = true,
            "u" => ops.update = true,
            "d" => ops.delete = true,
            "t" => ops.truncate = true,
            "none" => {}
            other => {
                return Err(format!(
                    "Invalid operation {other}: must be a comma list of c, u, d, t or none"
                ))
            }
        }
    }
    Ok(ops)
}

/// Debezium's rule that an include list and its exclude list are not both set: reported on the
/// exclude key.
pub fn pair_check(v: &mut ConfigValidation, props: &Properties, include: &str, exclude: &str) {
    let set = |k: &str| props.get(k).is_some_and(|v| !v.trim().is_empty());
    if set(include) && set(exclude) {
        v.add_error(exclude, format!("\"{include}\" is already specified"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_operations() {
        assert_eq!(
            parse_skipped("c, T").unwrap(),
            SkippedOps {
                create: true,
                truncate: true,
                ..SkippedOps::default()
            }
        );
        assert_eq!(parse_skipped("none").unwrap(), SkippedOps::default());
        assert!(parse_skipped("x")
            .unwrap_err()
            .contains("Invalid operation x"));
    }
}
