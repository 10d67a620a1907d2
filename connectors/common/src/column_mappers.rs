//! Debezium's column mappers for relational sources: `column.truncate.to.<n>.chars`,
//! `column.mask.with.<n>.chars`, `column.mask.hash.<algorithm>.with.salt.<salt>` and its
//! `column.mask.hash.v2.` form. Each key's value lists regexes matched (anchored,
//! case-insensitive) against fully qualified column names (`schema.table.column`,
//! `database.table.column`).
//!
//! Semantics follow Debezium's `ColumnMappers`: rules are tried in Debezium's order (truncate,
//! mask, hash, hash v2; keys of one kind by name) and the first whose list matches a column is
//! its only mapper, even where it does nothing to the column's values. Mappers change the
//! value of change events' `before` and `after` images, not keys. Masks and hashes change the
//! values of character columns only, but mark every matched column's field `masked=true` in
//! the value schema; truncation cuts any text or byte-string value (json, uuid and numbers as
//! strings included) and adds `truncateLength` where the declared length may exceed the
//! limit. A masked column's value is the mask even when the column is null (as in Debezium);
//! a hashed null stays null. A hash is the lower-case hex digest of the salt followed by the
//! value's bytes (v1: the bytes of the value serialised as a Java `String`, as Debezium's
//! `ObjectOutputStream` writes it; v2: its UTF-8 bytes), cut to the column's declared length
//! when it has one.
//!
//! `column.propagate.source.type` and `datatype.propagate.source.type` with a value are
//! refused by [`validate`] (not built), so no key is ever silently ignored.
//!
//! Invariant: [`ColumnMappers::parse`] accepts exactly what [`validate`] accepts.

use std::sync::Arc;

use headwater_api::{ConfigValidation, Properties};
use sha2::Digest;

use crate::name_filter::PatternList;

/// A hash function Java's `MessageDigest` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashAlgorithm {
    Md5,
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
    Sha512_224,
    Sha512_256,
}

impl HashAlgorithm {
    /// Java's standard names (case-insensitive), and their undashed forms.
    pub fn parse(name: &str) -> Option<HashAlgorithm> {
        Some(match name.to_ascii_uppercase().as_str() {
            "MD5" => HashAlgorithm::Md5,
            "SHA-1" | "SHA1" | "SHA" => HashAlgorithm::Sha1,
            "SHA-224" | "SHA224" => HashAlgorithm::Sha224,
            "SHA-256" | "SHA256" => HashAlgorithm::Sha256,
            "SHA-384" | "SHA384" => HashAlgorithm::Sha384,
            "SHA-512" | "SHA512" => HashAlgorithm::Sha512,
            "SHA-512/224" | "SHA512/224" => HashAlgorithm::Sha512_224,
            "SHA-512/256" | "SHA512/256" => HashAlgorithm::Sha512_256,
            _ => return None,
        })
    }

    fn digest(self, salt: &[u8], value: &[u8]) -> Vec<u8> {
        fn run<D: Digest>(salt: &[u8], value: &[u8]) -> Vec<u8> {
            let mut d = D::new();
            d.update(salt);
            d.update(value);
            d.finalize().to_vec()
        }
        match self {
            HashAlgorithm::Md5 => run::<md5::Md5>(salt, value),
            HashAlgorithm::Sha1 => run::<sha1::Sha1>(salt, value),
            HashAlgorithm::Sha224 => run::<sha2::Sha224>(salt, value),
            HashAlgorithm::Sha256 => run::<sha2::Sha256>(salt, value),
            HashAlgorithm::Sha384 => run::<sha2::Sha384>(salt, value),
            HashAlgorithm::Sha512 => run::<sha2::Sha512>(salt, value),
            HashAlgorithm::Sha512_224 => run::<sha2::Sha512_224>(salt, value),
            HashAlgorithm::Sha512_256 => run::<sha2::Sha512_256>(salt, value),
        }
    }
}

/// What a rule does to a column's values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColumnMapper {
    /// Strings longer than this many characters, and byte strings longer than this many
    /// bytes, are cut to it.
    Truncate(usize),
    /// The value (null included) becomes this text.
    Mask(Arc<str>),
    /// The value becomes the hex digest of the salt and the value (null stays null).
    Hash {
        algorithm: HashAlgorithm,
        salt: Arc<[u8]>,
        v2: bool,
    },
}

/// The kind of column a mapper is asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnKind {
    /// Character data (char, varchar, text, ...).
    Characters,
    /// Byte strings (bytea, binary, blob, ...).
    Bytes,
    Other,
}

/// A mapper chosen for one column, with what it needs to know about the column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedColumn {
    pub mapper: ColumnMapper,
    /// The column's declared length (characters), when it has one.
    pub length: Option<usize>,
    /// Whether the mapper changes this column's values (a mask or hash matching a column that
    /// is not character data only marks its schema).
    pub maps_values: bool,
}

impl MappedColumn {
    /// The schema parameter Debezium adds to the column's field in the value schema:
    /// `truncateLength` for a truncated column, `masked` for a masked or hashed one.
    pub fn schema_parameter(&self) -> Option<(&'static str, String)> {
        match self.mapper {
            ColumnMapper::Truncate(n) => Some(("truncateLength", n.to_string())),
            ColumnMapper::Mask(_) | ColumnMapper::Hash { .. } => Some(("masked", "true".into())),
        }
    }

    /// Maps a text value (`None` is null); a column whose values the mapper keeps keeps them.
    pub fn map_text(&self, value: Option<&str>) -> Option<String> {
        if !self.maps_values {
            return value.map(str::to_owned);
        }
        match &self.mapper {
            ColumnMapper::Truncate(n) => value.map(|s| truncate_utf16(s, *n).to_owned()),
            ColumnMapper::Mask(mask) => Some(mask.to_string()),
            ColumnMapper::Hash {
                algorithm,
                salt,
                v2,
            } => {
                let s = value?;
                let bytes = if *v2 {
                    s.as_bytes().to_vec()
                } else {
                    java_serialized_string(s)
                };
                let mut hex = to_hex(&algorithm.digest(salt, &bytes));
                if let Some(len) = self.length.filter(|l| *l > 0) {
                    hex.truncate(len);
                }
                Some(hex)
            }
        }
    }

    /// Maps a byte-string value (only truncation applies to bytes).
    pub fn map_bytes<'a>(&self, value: &'a [u8]) -> &'a [u8] {
        match self.mapper {
            ColumnMapper::Truncate(n) if self.maps_values && value.len() > n => &value[..n],
            _ => value,
        }
    }
}

/// The prefix of `s` of at most `max` UTF-16 code units (Java's `String.length`), cut at a
/// character boundary (Java would split a surrogate pair there).
fn truncate_utf16(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut units = 0;
    for (i, c) in s.char_indices() {
        units += c.len_utf16();
        if units > max {
            return &s[..i];
        }
    }
    s
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// A `String` as Java's `ObjectOutputStream.writeObject` writes it into a fresh stream: the
/// stream header, then `TC_STRING` with a 16-bit length (`TC_LONGSTRING` with a 64-bit one
/// above 65,535 bytes) and the text in Java's modified UTF-8 (NUL as two bytes, characters
/// outside the BMP as two three-byte surrogates).
fn java_serialized_string(s: &str) -> Vec<u8> {
    let mut text = Vec::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c as u32 {
            0 => text.extend_from_slice(&[0xC0, 0x80]),
            0x1..=0xFFFF => {
                let mut buf = [0u8; 4];
                text.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let u = u32::from(*u);
                    text.extend_from_slice(&[
                        0xE0 | (u >> 12) as u8,
                        0x80 | ((u >> 6) & 0x3F) as u8,
                        0x80 | (u & 0x3F) as u8,
                    ]);
                }
            }
        }
    }
    let mut out = vec![0xAC, 0xED, 0x00, 0x05];
    match u16::try_from(text.len()) {
        Ok(len) => {
            out.push(0x74);
            out.extend_from_slice(&len.to_be_bytes());
        }
        Err(_) => {
            out.push(0x7C);
            out.extend_from_slice(&(text.len() as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&text);
    out
}

/// The connector's column mapping rules, in the order they are tried.
#[derive(Clone, Debug, Default)]
pub struct ColumnMappers {
    rules: Vec<(PatternList, ColumnMapper)>,
}

const TRUNCATE: (&str, &str) = ("column.truncate.to.", ".chars");
const MASK: (&str, &str) = ("column.mask.with.", ".chars");
const HASH_V2: &str = "column.mask.hash.v2.";
const HASH: &str = "column.mask.hash.";
const SALT: &str = ".with.salt.";
const NOT_BUILT: [&str; 2] = [
    "column.propagate.source.type",
    "datatype.propagate.source.type",
];

/// One mapper key read: the rule, or what is wrong with the key or its value.
fn parse_key(key: &str, value: &str) -> Option<Result<(PatternList, ColumnMapper), String>> {
    let number = |rest: &str, suffix: &str| -> Result<usize, String> {
        rest.strip_suffix(suffix)
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| {
                format!(
                    "{key} must be {}<n>{suffix} with a whole number n",
                    &key[..key.len() - rest.len()]
                )
            })
    };
    let mapper = if let Some(rest) = key.strip_prefix(TRUNCATE.0) {
        number(rest, TRUNCATE.1).map(ColumnMapper::Truncate)
    } else if let Some(rest) = key.strip_prefix(MASK.0) {
        number(rest, MASK.1).map(|n| ColumnMapper::Mask(Arc::from("*".repeat(n))))
    } else if let Some(rest) = key.strip_prefix(HASH) {
        let (v2, rest) = match rest.strip_prefix("v2.") {
            Some(r) => (true, r),
            None => (false, rest),
        };
        match rest.split_once(SALT) {
            Some((alg, salt)) if !alg.contains('.') && !salt.is_empty() => {
                match HashAlgorithm::parse(alg) {
                    Some(algorithm) => Ok(ColumnMapper::Hash {
                        algorithm,
                        salt: Arc::from(salt.as_bytes()),
                        v2,
                    }),
                    None => Err(format!(
                        "hash algorithm {alg:?} is not supported: use MD5, SHA-1, SHA-224, SHA-256, SHA-384, SHA-512, SHA-512/224 or SHA-512/256"
                    )),
                }
            }
            _ => Err(format!(
                "{key} must be {HASH}[v2.]<algorithm>{SALT}<salt>"
            )),
        }
    } else if NOT_BUILT.contains(&key) {
        if value.trim().is_empty() {
            return None;
        }
        Err(format!(
            "{key} is not supported yet: the __debezium.source.column.* schema parameters are not written; remove the key"
        ))
    } else if key.starts_with("column.mask.") || key.starts_with("column.truncate.") {
        Err(format!(
            "{key} is not a column mapper Debezium defines (column.truncate.to.<n>.chars, column.mask.with.<n>.chars, column.mask.hash[.v2].<algorithm>.with.salt.<salt>)"
        ))
    } else {
        return None;
    };
    Some(mapper.and_then(|m| {
        let list = PatternList::parse(value)?;
        Ok((list, m))
    }))
}

/// Debezium's order of mapper kinds; keys of one kind are taken by name.
fn kind_rank(key: &str) -> usize {
    if key.starts_with(TRUNCATE.0) {
        0
    } else if key.starts_with(MASK.0) {
        1
    } else if key.starts_with(HASH_V2) {
        3
    } else {
        2
    }
}

/// Reports every bad mapper key on its own field.
pub fn validate(v: &mut ConfigValidation, props: &Properties) {
    for (key, value) in props {
        if let Some(Err(e)) = parse_key(key, value) {
            v.add_error(key, e);
        }
    }
}

impl ColumnMappers {
    /// The rules of a configuration [`validate`] accepted (bad keys are left out).
    pub fn parse(props: &Properties) -> ColumnMappers {
        let mut keyed: Vec<(usize, &String, (PatternList, ColumnMapper))> = props
            .iter()
            .filter_map(|(k, v)| match parse_key(k, v)? {
                Ok(rule) => Some((kind_rank(k), k, rule)),
                Err(_) => None,
            })
            .collect();
        keyed.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        ColumnMappers {
            rules: keyed.into_iter().map(|(_, _, r)| r).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The mapper of the column `qualified` (`schema.table.column`) of `kind` with declared
    /// `length`, if a rule matches it (see [`MappedColumn::maps_values`]). Truncation where
    /// the declared length cannot exceed the limit is no mapper at all (Debezium's rule).
    pub fn for_column(
        &self,
        qualified: &str,
        kind: ColumnKind,
        length: Option<usize>,
    ) -> Option<MappedColumn> {
        let (_, mapper) = self.rules.iter().find(|(p, _)| p.matches(qualified))?;
        let maps_values = match mapper {
            ColumnMapper::Truncate(n) => length.is_none_or(|l| l > *n),
            ColumnMapper::Mask(_) | ColumnMapper::Hash { .. } => kind == ColumnKind::Characters,
        };
        if !maps_values && matches!(mapper, ColumnMapper::Truncate(_)) {
            return None;
        }
        Some(MappedColumn {
            mapper: mapper.clone(),
            length,
            maps_values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> Properties {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn rules_in_debeziums_order_first_match_wins() {
        let m = ColumnMappers::parse(&props(&[
            (
                "column.mask.hash.SHA-256.with.salt.CzQMA0cB5K",
                "public.users.email",
            ),
            ("column.mask.with.5.chars", "public.users.(ssn|email)"),
            (
                "column.truncate.to.3.chars",
                "public.users.name,public.users.photo",
            ),
            ("table.include.list", "public.users"),
        ]));
        let email = m
            .for_column("PUBLIC.users.email", ColumnKind::Characters, Some(255))
            .unwrap();
        assert_eq!(email.mapper, ColumnMapper::Mask(Arc::from("*****")));
        assert_eq!(
            email.map_text(None).as_deref(),
            Some("*****"),
            "null is masked too"
        );
        let name = m
            .for_column("public.users.name", ColumnKind::Characters, None)
            .unwrap();
        assert_eq!(name.map_text(Some("Zoë Example")).as_deref(), Some("Zoë"));
        assert_eq!(name.map_text(None), None);
        assert_eq!(
            name.schema_parameter(),
            Some(("truncateLength", "3".into()))
        );
        let photo = m
            .for_column("public.users.photo", ColumnKind::Bytes, None)
            .unwrap();
        assert_eq!(photo.map_bytes(b"abcdef"), b"abc");
        assert!(
            m.for_column("public.users.name", ColumnKind::Characters, Some(2))
                .is_none(),
            "a column declared no longer than the limit is left alone"
        );
        let masked_number = m
            .for_column("public.users.ssn", ColumnKind::Other, None)
            .unwrap();
        assert_eq!(masked_number.map_text(Some("7")).as_deref(), Some("7"));
        assert_eq!(
            masked_number.schema_parameter(),
            Some(("masked", "true".into())),
            "a mask marks any matched column"
        );
        let truncated_json = m
            .for_column("public.users.name", ColumnKind::Other, None)
            .unwrap();
        assert_eq!(
            truncated_json.map_text(Some("{\"a\": 1}")).as_deref(),
            Some("{\"a")
        );
        assert!(m
            .for_column("public.users.id", ColumnKind::Characters, None)
            .is_none());
    }

    #[test]
    fn hashes_match_debeziums_v1_and_v2_bytes() {
        let m = ColumnMappers::parse(&props(&[
            ("column.mask.hash.SHA-256.with.salt.salt", "s.t.v1"),
            ("column.mask.hash.v2.SHA-256.with.salt.salt", "s.t.v2"),
        ]));
        let v1 = m
            .for_column("s.t.v1", ColumnKind::Characters, None)
            .unwrap();
        let v2 = m
            .for_column("s.t.v2", ColumnKind::Characters, Some(10))
            .unwrap();
        // v1 hashes Java's serialised String: AC ED 00 05 74 00 03 'abc'.
        let mut java = vec![0xAC, 0xED, 0x00, 0x05, 0x74, 0x00, 0x03];
        java.extend_from_slice(b"abc");
        assert_eq!(java_serialized_string("abc"), java);
        let expect_v1 = to_hex(&HashAlgorithm::Sha256.digest(b"salt", &java));
        assert_eq!(v1.map_text(Some("abc")), Some(expect_v1));
        assert_eq!(v1.map_text(None), None, "a hashed null stays null");
        // v2 hashes the UTF-8 bytes, cut to the column's length.
        assert_eq!(
            to_hex(&HashAlgorithm::Sha256.digest(b"", b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let full = to_hex(&HashAlgorithm::Sha256.digest(b"salt", b"abc"));
        assert_eq!(v2.map_text(Some("abc")), Some(full[..10].to_owned()));
        // Modified UTF-8: NUL in two bytes, an emoji as two three-byte surrogates.
        assert_eq!(
            java_serialized_string("\0😀")[7..],
            [0xC0, 0x80, 0xED, 0xA0, 0xBD, 0xED, 0xB8, 0x80]
        );
        assert_eq!(
            to_hex(&HashAlgorithm::Md5.digest(b"", b"")),
            "d41d8cd98f00b204e9800998ecf8427e"
        );
    }

    #[test]
    fn bad_keys_are_reported_on_their_field() {
        let p = props(&[
            ("column.mask.hash.SHA3-256.with.salt.x", "a.b.c"),
            ("column.mask.with.x.chars", "a.b.c"),
            ("column.truncate.to.5.chars", "a.b.("),
            ("column.propagate.source.type", "a.b.c"),
            ("datatype.propagate.source.type", " "),
            ("column.mask.hash.SHA-256", "a.b.c"),
            ("column.mask.hash.MD5.with.salt.s", "a.b.c"),
        ]);
        let mut v = ConfigValidation::default();
        validate(&mut v, &p);
        let errs = v.errors_by_field();
        assert!(errs["column.mask.hash.SHA3-256.with.salt.x"][0].contains("not supported"));
        assert!(errs["column.mask.with.x.chars"][0].contains("whole number"));
        assert!(errs["column.truncate.to.5.chars"][0].contains("a.b.("));
        assert!(errs["column.propagate.source.type"][0].contains("not supported yet"));
        assert!(errs["column.mask.hash.SHA-256"][0].contains("with.salt"));
        assert!(!errs.contains_key("column.mask.hash.MD5.with.salt.s"));
        assert!(
            !errs.contains_key("datatype.propagate.source.type"),
            "an empty value is a no-op"
        );
        assert_eq!(ColumnMappers::parse(&p).rules.len(), 1);
    }
}
