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
//! `column.propagate.source.type` (regexes for qualified column names) and
//! `datatype.propagate.source.type` (regexes for `<table>.<type name>`, the type name as the
//! connector reports it, e.g. `public.orders.varchar`) add Debezium's
//! `__debezium.source.column.type` (the type name upper-cased), `.length`, `.scale` (each when
//! the column has one) and `.name` (the column's own name) parameters to the matched column's
//! field in the value schema; values are unchanged. Debezium tries them after truncation and
//! masks and before hashes, and here too the first matching rule is the column's only mapper.
//! A connector that cannot report the type facts refuses the two keys itself.
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
    /// The values are kept; the field schema gets the source type parameters.
    PropagateSourceType,
}

/// What a column rule is matched against: the qualified column name, or `<table>.<type name>`
/// (`datatype.propagate.source.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Matched {
    ColumnName,
    DataType,
}

/// What the rules need to know of one column.
#[derive(Clone, Copy, Debug)]
pub struct ColumnFacts<'a> {
    /// The table's qualified name: `schema.table` or `database.table`.
    pub table: &'a str,
    pub column: &'a str,
    pub kind: ColumnKind,
    /// The declared length in characters (`varchar(n)`), for truncation and hashes.
    pub length: Option<usize>,
    /// The type as Debezium's `Column.typeName()` has it for this source (`int4`, `serial`,
    /// `VARCHAR`), and its `length()` and `scale()` when set.
    pub type_name: &'a str,
    pub type_length: Option<i64>,
    pub type_scale: Option<i64>,
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
    /// The parameters the mapper adds to the column's field in the value schema, in order.
    parameters: Vec<(&'static str, String)>,
}

impl MappedColumn {
    /// The schema parameters Debezium adds to the column's field in the value schema, in
    /// order: `truncateLength` for a truncated column, `masked` for a masked or hashed one,
    /// the `__debezium.source.column.*` ones for a propagated type.
    pub fn schema_parameters(&self) -> &[(&'static str, String)] {
        &self.parameters
    }

    /// Maps a text value (`None` is null); a column whose values the mapper keeps keeps them.
    pub fn map_text(&self, value: Option<&str>) -> Option<String> {
        if !self.maps_values {
            return value.map(str::to_owned);
        }
        match &self.mapper {
            ColumnMapper::Truncate(n) => value.map(|s| truncate_utf16(s, *n).to_owned()),
            ColumnMapper::Mask(mask) => Some(mask.to_string()),
            ColumnMapper::PropagateSourceType => value.map(str::to_owned),
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
    rules: Vec<(PatternList, Matched, ColumnMapper)>,
}

const TRUNCATE: (&str, &str) = ("column.truncate.to.", ".chars");
const MASK: (&str, &str) = ("column.mask.with.", ".chars");
const HASH_V2: &str = "column.mask.hash.v2.";
const HASH: &str = "column.mask.hash.";
const SALT: &str = ".with.salt.";
/// The keys of the type-propagating rules.
pub const PROPAGATE_KEYS: [&str; 2] = [
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
    } else if PROPAGATE_KEYS.contains(&key) {
        if value.trim().is_empty() {
            return None;
        }
        Ok(ColumnMapper::PropagateSourceType)
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

/// Debezium's order of mapper kinds (`ColumnMappers.create`: truncate, mask, propagate by
/// column, propagate by data type, hash, hash v2); keys of one kind are taken by name.
fn kind_rank(key: &str) -> usize {
    if key.starts_with(TRUNCATE.0) {
        0
    } else if key.starts_with(MASK.0) {
        1
    } else if key == PROPAGATE_KEYS[0] {
        2
    } else if key == PROPAGATE_KEYS[1] {
        3
    } else if key.starts_with(HASH_V2) {
        5
    } else {
        4
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
            rules: keyed
                .into_iter()
                .map(|(_, key, (list, mapper))| {
                    let matched = if key == PROPAGATE_KEYS[1] {
                        Matched::DataType
                    } else {
                        Matched::ColumnName
                    };
                    (list, matched, mapper)
                })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The mapper of a column, if a rule matches it (see [`MappedColumn::maps_values`]).
    /// Truncation where the declared length cannot exceed the limit is no mapper at all
    /// (Debezium's rule).
    pub fn for_column(&self, facts: &ColumnFacts<'_>) -> Option<MappedColumn> {
        let qualified_column = format!("{}.{}", facts.table, facts.column);
        let mut qualified_type = None;
        let (_, _, mapper) = self.rules.iter().find(|(p, matched, _)| match matched {
            Matched::ColumnName => p.matches(&qualified_column),
            Matched::DataType => p.matches(
                qualified_type
                    .get_or_insert_with(|| format!("{}.{}", facts.table, facts.type_name)),
            ),
        })?;
        let maps_values = match mapper {
            ColumnMapper::Truncate(n) => facts.length.is_none_or(|l| l > *n),
            ColumnMapper::Mask(_) | ColumnMapper::Hash { .. } => {
                facts.kind == ColumnKind::Characters
            }
            ColumnMapper::PropagateSourceType => false,
        };
        let parameters = match mapper {
            ColumnMapper::Truncate(_) if !maps_values => return None,
            ColumnMapper::Truncate(n) => vec![("truncateLength", n.to_string())],
            ColumnMapper::Mask(_) | ColumnMapper::Hash { .. } => vec![("masked", "true".into())],
            ColumnMapper::PropagateSourceType => {
                let mut p = vec![(
                    "__debezium.source.column.type",
                    facts.type_name.to_uppercase(),
                )];
                if let Some(length) = facts.type_length {
                    p.push(("__debezium.source.column.length", length.to_string()));
                }
                if let Some(scale) = facts.type_scale {
                    p.push(("__debezium.source.column.scale", scale.to_string()));
                }
                p.push(("__debezium.source.column.name", facts.column.to_owned()));
                p
            }
        };
        Some(MappedColumn {
            mapper: mapper.clone(),
            length: facts.length,
            maps_values,
            parameters,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A column named by `qualified` (`table.column`, the table being everything before the
    /// last dot) of type `text`.
    fn facts(qualified: &str, kind: ColumnKind, length: Option<usize>) -> ColumnFacts<'_> {
        let (table, column) = qualified.rsplit_once('.').unwrap();
        ColumnFacts {
            table,
            column,
            kind,
            length,
            type_name: "text",
            type_length: Some(i64::from(i32::MAX)),
            type_scale: Some(0),
        }
    }

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
            .for_column(&facts(
                "PUBLIC.users.email",
                ColumnKind::Characters,
                Some(255),
            ))
            .unwrap();
        assert_eq!(email.mapper, ColumnMapper::Mask(Arc::from("*****")));
        assert_eq!(
            email.map_text(None).as_deref(),
            Some("*****"),
            "null is masked too"
        );
        let name = m
            .for_column(&facts("public.users.name", ColumnKind::Characters, None))
            .unwrap();
        assert_eq!(name.map_text(Some("Zoë Example")).as_deref(), Some("Zoë"));
        assert_eq!(name.map_text(None), None);
        assert_eq!(
            name.schema_parameters(),
            [("truncateLength", "3".to_owned())]
        );
        let photo = m
            .for_column(&facts("public.users.photo", ColumnKind::Bytes, None))
            .unwrap();
        assert_eq!(photo.map_bytes(b"abcdef"), b"abc");
        assert!(
            m.for_column(&facts("public.users.name", ColumnKind::Characters, Some(2)))
                .is_none(),
            "a column declared no longer than the limit is left alone"
        );
        let masked_number = m
            .for_column(&facts("public.users.ssn", ColumnKind::Other, None))
            .unwrap();
        assert_eq!(masked_number.map_text(Some("7")).as_deref(), Some("7"));
        assert_eq!(
            masked_number.schema_parameters(),
            [("masked", "true".to_owned())],
            "a mask marks any matched column"
        );
        let truncated_json = m
            .for_column(&facts("public.users.name", ColumnKind::Other, None))
            .unwrap();
        assert_eq!(
            truncated_json.map_text(Some("{\"a\": 1}")).as_deref(),
            Some("{\"a")
        );
        assert!(m
            .for_column(&facts("public.users.id", ColumnKind::Characters, None))
            .is_none());
    }

    #[test]
    fn hashes_match_debeziums_v1_and_v2_bytes() {
        let m = ColumnMappers::parse(&props(&[
            ("column.mask.hash.SHA-256.with.salt.salt", "s.t.v1"),
            ("column.mask.hash.v2.SHA-256.with.salt.salt", "s.t.v2"),
        ]));
        let v1 = m
            .for_column(&facts("s.t.v1", ColumnKind::Characters, None))
            .unwrap();
        let v2 = m
            .for_column(&facts("s.t.v2", ColumnKind::Characters, Some(10)))
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
        assert!(
            !errs.contains_key("column.propagate.source.type"),
            "built: a list of column patterns"
        );
        assert!(errs["column.mask.hash.SHA-256"][0].contains("with.salt"));
        assert!(!errs.contains_key("column.mask.hash.MD5.with.salt.s"));
        assert!(
            !errs.contains_key("datatype.propagate.source.type"),
            "an empty value is a no-op"
        );
        assert_eq!(ColumnMappers::parse(&p).rules.len(), 2);
    }

    #[test]
    fn propagated_types_come_between_masks_and_hashes() {
        let m = ColumnMappers::parse(&props(&[
            (
                "column.mask.hash.SHA-256.with.salt.s",
                "public.t.(note|code)",
            ),
            (
                "column.propagate.source.type",
                "public.t.(code|amount|name)",
            ),
            ("datatype.propagate.source.type", ".+\\.SERIAL"),
            ("column.truncate.to.2.chars", "public.t.name"),
        ]));
        let amount = m
            .for_column(&ColumnFacts {
                table: "public.t",
                column: "amount",
                kind: ColumnKind::Other,
                length: None,
                type_name: "numeric",
                type_length: Some(12),
                type_scale: Some(2),
            })
            .unwrap();
        assert!(!amount.maps_values);
        assert_eq!(amount.map_text(Some("1.50")).as_deref(), Some("1.50"));
        let expected: Vec<(&str, String)> = vec![
            ("__debezium.source.column.type", "NUMERIC".into()),
            ("__debezium.source.column.length", "12".into()),
            ("__debezium.source.column.scale", "2".into()),
            ("__debezium.source.column.name", "amount".into()),
        ];
        assert_eq!(amount.schema_parameters(), expected.as_slice());
        // Propagation is tried before hashes: `code` keeps its value.
        let code = m
            .for_column(&facts("public.t.code", ColumnKind::Characters, Some(8)))
            .unwrap();
        assert_eq!(code.mapper, ColumnMapper::PropagateSourceType);
        assert_eq!(code.map_text(Some("abc")).as_deref(), Some("abc"));
        let note = m
            .for_column(&facts("public.t.note", ColumnKind::Characters, None))
            .unwrap();
        assert!(matches!(note.mapper, ColumnMapper::Hash { .. }));
        // Truncation comes first: `name` is only truncated.
        let name = m
            .for_column(&facts("public.t.name", ColumnKind::Characters, None))
            .unwrap();
        assert_eq!(name.mapper, ColumnMapper::Truncate(2));
        // By data type: `<table>.<type name>`, case-insensitive; no length or scale unset.
        let id = m
            .for_column(&ColumnFacts {
                table: "public.t",
                column: "id",
                kind: ColumnKind::Other,
                length: None,
                type_name: "serial",
                type_length: None,
                type_scale: None,
            })
            .unwrap();
        let expected: Vec<(&str, String)> = vec![
            ("__debezium.source.column.type", "SERIAL".into()),
            ("__debezium.source.column.name", "id".into()),
        ];
        assert_eq!(id.schema_parameters(), expected.as_slice());
        assert!(m
            .for_column(&facts("public.t.other", ColumnKind::Characters, None))
            .is_none());
    }
}
