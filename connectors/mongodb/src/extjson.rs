//! MongoDB extended JSON written byte for byte as Debezium's MongoDB connector writes it with the
//! Java driver's `JsonWriter`, in the three dialects one Debezium event mixes
//! (`../shared/golden/debezium/mongodb/FORMAT_NOTES.md`):
//!
//! - [`Dialect::Strict`]: `before`/`after` (legacy STRICT mode, "indent" with empty indent and
//!   newline strings: `{"a": 1,"b": [1,2]}`; `{"$numberLong": "7"}`, `{"$date": 1709214356789}`,
//!   `{"$binary": "…","$type": "00"}`, `{"$regex": …,"$options": …}`, bare `NaN`/`Infinity`);
//! - [`Dialect::RelaxedCompact`]: the key's `id` (RELAXED mode with the same compact layout:
//!   plain int64, ISO `$date`, `{"$binary": {"base64": …,"subType": …}}`);
//! - [`Dialect::Relaxed`]: `updateDescription.updatedFields` (RELAXED, no indent:
//!   `{"a": 1, "b": [1, 2]}`, `{"$numberDouble": "NaN"}`).
//!
//! Doubles are Java's `Double.toString` digits with an explicit `+` on positive exponents
//! (`1.0E+21`); strings are escaped as the Java writer does (`\"`, `\\`, `\b \f \n \r \t`, control
//! and format characters, line/paragraph separators, private-use characters and every UTF-16
//! surrogate as lower-case `\uXXXX`; so characters outside the BMP become surrogate pairs).
//!
//! Invariants: output is appended to a `String` and depends only on the value and the dialect;
//! document members keep their stored order. Known difference: Java also escapes code points
//! unassigned in its Unicode version; this writer escapes only the categories listed above.

use base64::Engine as _;
use mongodb::bson::{Bson, Document, RawBsonRef, RawDocument, RawDocumentBuf};

use crate::rawbson;
use headwater_api::civil::civil_from_days;
use headwater_api::scan;

/// Which of the Java writer's settings to reproduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// `JsonMode.STRICT`, compact indent (`","` between members).
    Strict,
    /// `JsonMode.RELAXED`, compact indent (`","` between members).
    RelaxedCompact,
    /// `JsonMode.RELAXED`, no indent (`", "` between members and array items).
    Relaxed,
}

impl Dialect {
    fn separator(self) -> &'static str {
        match self {
            Dialect::Strict | Dialect::RelaxedCompact => ",",
            Dialect::Relaxed => ", ",
        }
    }
    fn relaxed(self) -> bool {
        self != Dialect::Strict
    }
}

/// The largest `$date` the relaxed writer prints as an ISO string (9999-12-31T23:59:59.999Z).
const LAST_MS_OF_YEAR_9999: i64 = 253_402_300_799_999;

/// Malformed BSON (what the driver's raw reader reported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadBson(pub String);

impl std::fmt::Display for BadBson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed BSON: {}", self.0)
    }
}

/// A (typed) document as extended JSON.
pub fn document(doc: &Document, dialect: Dialect) -> String {
    let mut out = String::with_capacity(256);
    match RawDocumentBuf::try_from(doc) {
        Ok(raw) => {
            // A document the driver itself encoded is well-formed.
            let _ = write_document(&mut out, &raw, dialect);
        }
        Err(_) => out.push_str("{}"),
    }
    out
}

/// A (typed) value as extended JSON.
pub fn value(v: &Bson, dialect: Dialect) -> String {
    let mut holder = Document::new();
    holder.insert("v", v.clone());
    let mut out = String::with_capacity(32);
    if let Ok(raw) = RawDocumentBuf::try_from(&holder) {
        if let Ok(Some(v)) = raw.get("v") {
            let _ = write_value(&mut out, v, dialect);
        }
    }
    out
}

/// Appends a raw document as extended JSON.
pub fn write_document(
    out: &mut String,
    doc: &RawDocument,
    dialect: Dialect,
) -> Result<(), BadBson> {
    write_document_bytes(out, doc.as_bytes(), dialect)
}

/// [`write_document`] of a document's bytes, walked with [`rawbson`]: the common types are
/// written straight from their bytes, the rare ones through the driver's typed values
/// ([`write_value`]); both give the same text.
pub fn write_document_bytes(out: &mut String, doc: &[u8], dialect: Dialect) -> Result<(), BadBson> {
    out.push('{');
    for (i, element) in rawbson::elements(doc)?.enumerate() {
        let element = element?;
        if i > 0 {
            push_separator(out, dialect);
        }
        write_key_in(out, element.key, doc);
        write_element(out, element.kind, element.value, doc, dialect)?;
    }
    out.push('}');
    Ok(())
}

/// Appends the separator between members or items.
#[inline]
fn push_separator(out: &mut String, dialect: Dialect) {
    match dialect {
        Dialect::Strict | Dialect::RelaxedCompact => out.push(','),
        Dialect::Relaxed => out.push_str(", "),
    }
}

/// Appends one value given as its BSON type byte and value bytes, which lie inside the
/// document (or array) bytes `container`.
pub fn write_element(
    out: &mut String,
    kind: u8,
    value: &[u8],
    container: &[u8],
    dialect: Dialect,
) -> Result<(), BadBson> {
    match kind {
        rawbson::DOUBLE => write_double(out, f64::from_bits(rawbson::int64(value) as u64), dialect),
        rawbson::STRING => write_string_in(out, rawbson::string(value)?, container),
        rawbson::DOCUMENT => write_document_bytes(out, value, dialect)?,
        rawbson::ARRAY => {
            out.push('[');
            for (i, item) in rawbson::elements(value)?.enumerate() {
                let item = item?;
                if i > 0 {
                    push_separator(out, dialect);
                }
                write_element(out, item.kind, item.value, value, dialect)?;
            }
            out.push(']');
        }
        rawbson::BOOLEAN => match value[0] {
            0 => out.push_str("false"),
            1 => out.push_str("true"),
            other => return Err(BadBson(format!("invalid boolean value {other}"))),
        },
        rawbson::NULL => out.push_str("null"),
        rawbson::INT32 => out.push_str(itoa::Buffer::new().format(rawbson::int32(value))),
        rawbson::INT64 if dialect.relaxed() => {
            out.push_str(itoa::Buffer::new().format(rawbson::int64(value)))
        }
        rawbson::INT64 => {
            out.push_str("{\"$numberLong\": \"");
            out.push_str(itoa::Buffer::new().format(rawbson::int64(value)));
            out.push_str("\"}");
        }
        rawbson::OBJECT_ID => {
            // Laid out in a stack buffer and appended at once (one capacity check, not 24).
            const HEX: &[u8; 16] = b"0123456789abcdef";
            const PREFIX: usize = "{\"$oid\": \"".len();
            let mut text = *b"{\"$oid\": \"000000000000000000000000\"}";
            for (k, b) in value.iter().take(12).enumerate() {
                text[PREFIX + 2 * k] = HEX[usize::from(b >> 4)];
                text[PREFIX + 2 * k + 1] = HEX[usize::from(b & 0x0f)];
            }
            // The text is ASCII: the template's characters and hex digits.
            out.push_str(std::str::from_utf8(&text).unwrap_or_default());
        }
        rawbson::DATETIME if !dialect.relaxed() => {
            out.push_str("{\"$date\": ");
            out.push_str(itoa::Buffer::new().format(rawbson::int64(value)));
            out.push('}');
        }
        _ => write_rare_element(out, kind, value, dialect)?,
    }
    Ok(())
}

/// [`write_element`] of the types it does not write itself, through the driver's typed value
/// of a one-element document.
fn write_rare_element(
    out: &mut String,
    kind: u8,
    value: &[u8],
    dialect: Dialect,
) -> Result<(), BadBson> {
    let total = 4 + 1 + 2 + value.len() + 1;
    let mut doc = Vec::with_capacity(total);
    doc.extend_from_slice(&(total as i32).to_le_bytes());
    doc.push(kind);
    doc.extend_from_slice(b"v\0");
    doc.extend_from_slice(value);
    doc.push(0);
    let raw = RawDocument::from_bytes(&doc).map_err(|e| BadBson(e.to_string()))?;
    match raw.iter().next() {
        Some(Ok((_, v))) => write_value(out, v, dialect),
        Some(Err(e)) => Err(BadBson(e.to_string())),
        None => Err(BadBson("an element vanished".into())),
    }
}

/// [`write_document`] with member names mapped by `name` (a member whose name maps to `None`
/// is left out): an update description's paths after `field.exclude.list`/`field.renames`.
pub fn write_document_with(
    out: &mut String,
    doc: &RawDocument,
    dialect: Dialect,
    rules: &crate::fields::FieldRules,
) -> Result<(), BadBson> {
    out.push('{');
    let mut first = true;
    for element in doc.iter() {
        let (key, v) = element.map_err(|e| BadBson(e.to_string()))?;
        let Some(k) = rules.apply_path(key.as_str()) else {
            continue;
        };
        if !first {
            out.push_str(dialect.separator());
        }
        first = false;
        write_string(out, &k);
        out.push_str(": ");
        if rules.reaches_inside(key.as_str()) {
            // A sub-document (or array element) set whole: the rules apply inside it too.
            let mut typed = Bson::try_from(v).map_err(|e| BadBson(e.to_string()))?;
            rules.apply_inside(key.as_str(), &mut typed);
            out.push_str(&value(&typed, dialect));
        } else {
            write_value(out, v, dialect)?;
        }
    }
    out.push('}');
    Ok(())
}

/// Writes one member's value.
type WriteMember<'a> = &'a dyn Fn(&mut String);

/// Writes `{"name": value, ...}`, each value by its writer.
fn wrapper(out: &mut String, dialect: Dialect, members: &[(&str, WriteMember<'_>)]) {
    out.push('{');
    for (i, (name, write)) in members.iter().enumerate() {
        if i > 0 {
            out.push_str(dialect.separator());
        }
        write_string(out, name);
        out.push_str(": ");
        write(out);
    }
    out.push('}');
}

/// Appends a raw value as extended JSON.
pub fn write_value(out: &mut String, v: RawBsonRef<'_>, dialect: Dialect) -> Result<(), BadBson> {
    match v {
        RawBsonRef::Double(d) => write_double(out, d, dialect),
        RawBsonRef::String(s) => write_string(out, s),
        RawBsonRef::Array(items) => {
            out.push('[');
            for (i, item) in items.into_iter().enumerate() {
                let item = item.map_err(|e| BadBson(e.to_string()))?;
                if i > 0 {
                    out.push_str(dialect.separator());
                }
                write_value(out, item, dialect)?;
            }
            out.push(']');
        }
        RawBsonRef::Document(d) => write_document(out, d, dialect)?,
        RawBsonRef::Boolean(b) => out.push_str(if b { "true" } else { "false" }),
        RawBsonRef::Null => out.push_str("null"),
        RawBsonRef::RegularExpression(re) => {
            let (pattern, options) = (re.pattern.as_str(), re.options.as_str());
            if dialect.relaxed() {
                wrapper(
                    out,
                    dialect,
                    &[("$regularExpression", &|o: &mut String| {
                        wrapper(
                            o,
                            dialect,
                            &[
                                ("pattern", &|o: &mut String| write_string(o, pattern)),
                                ("options", &|o: &mut String| write_string(o, options)),
                            ],
                        )
                    })],
                );
            } else {
                wrapper(
                    out,
                    dialect,
                    &[
                        ("$regex", &|o: &mut String| write_string(o, pattern)),
                        ("$options", &|o: &mut String| write_string(o, options)),
                    ],
                );
            }
        }
        RawBsonRef::JavaScriptCode(code) => wrapper(
            out,
            dialect,
            &[("$code", &|o: &mut String| write_string(o, code))],
        ),
        RawBsonRef::JavaScriptCodeWithScope(cs) => {
            let mut scope = String::new();
            write_document(&mut scope, cs.scope, dialect)?;
            wrapper(
                out,
                dialect,
                &[
                    ("$code", &|o: &mut String| write_string(o, cs.code)),
                    ("$scope", &|o: &mut String| o.push_str(&scope)),
                ],
            );
        }
        RawBsonRef::Int32(i) => out.push_str(itoa::Buffer::new().format(i)),
        RawBsonRef::Int64(i) => {
            if dialect.relaxed() {
                out.push_str(itoa::Buffer::new().format(i));
            } else {
                wrapper(
                    out,
                    dialect,
                    &[("$numberLong", &|o: &mut String| {
                        write_string(o, itoa::Buffer::new().format(i))
                    })],
                );
            }
        }
        RawBsonRef::Timestamp(ts) => wrapper(
            out,
            dialect,
            &[("$timestamp", &|o: &mut String| {
                wrapper(
                    o,
                    dialect,
                    &[
                        ("t", &|o: &mut String| {
                            o.push_str(itoa::Buffer::new().format(ts.time))
                        }),
                        ("i", &|o: &mut String| {
                            o.push_str(itoa::Buffer::new().format(ts.increment))
                        }),
                    ],
                )
            })],
        ),
        RawBsonRef::Binary(b) => {
            let data = base64::engine::general_purpose::STANDARD.encode(b.bytes);
            let subtype = format!("{:02x}", u8::from(b.subtype));
            if dialect.relaxed() {
                wrapper(
                    out,
                    dialect,
                    &[("$binary", &|o: &mut String| {
                        wrapper(
                            o,
                            dialect,
                            &[
                                ("base64", &|o: &mut String| write_string(o, &data)),
                                ("subType", &|o: &mut String| write_string(o, &subtype)),
                            ],
                        )
                    })],
                );
            } else {
                wrapper(
                    out,
                    dialect,
                    &[
                        ("$binary", &|o: &mut String| write_string(o, &data)),
                        ("$type", &|o: &mut String| write_string(o, &subtype)),
                    ],
                );
            }
        }
        RawBsonRef::ObjectId(oid) => wrapper(
            out,
            dialect,
            &[("$oid", &|o: &mut String| write_string(o, &oid.to_hex()))],
        ),
        RawBsonRef::DateTime(dt) => {
            let ms = dt.timestamp_millis();
            if dialect.relaxed() && (0..=LAST_MS_OF_YEAR_9999).contains(&ms) {
                wrapper(
                    out,
                    dialect,
                    &[("$date", &|o: &mut String| write_string(o, &iso_instant(ms)))],
                );
            } else if dialect.relaxed() {
                wrapper(
                    out,
                    dialect,
                    &[("$date", &|o: &mut String| {
                        wrapper(
                            o,
                            dialect,
                            &[("$numberLong", &|o: &mut String| {
                                write_string(o, itoa::Buffer::new().format(ms))
                            })],
                        )
                    })],
                );
            } else {
                wrapper(
                    out,
                    dialect,
                    &[("$date", &|o: &mut String| {
                        o.push_str(itoa::Buffer::new().format(ms))
                    })],
                );
            }
        }
        RawBsonRef::Symbol(s) => wrapper(
            out,
            dialect,
            &[("$symbol", &|o: &mut String| write_string(o, s))],
        ),
        RawBsonRef::Decimal128(d) => {
            let text = d.to_string();
            wrapper(
                out,
                dialect,
                &[("$numberDecimal", &|o: &mut String| write_string(o, &text))],
            );
        }
        RawBsonRef::Undefined => wrapper(
            out,
            dialect,
            &[("$undefined", &|o: &mut String| o.push_str("true"))],
        ),
        RawBsonRef::MaxKey => wrapper(out, dialect, &[("$maxKey", &|o: &mut String| o.push('1'))]),
        RawBsonRef::MinKey => wrapper(out, dialect, &[("$minKey", &|o: &mut String| o.push('1'))]),
        RawBsonRef::DbPointer(_) => {
            let typed = Bson::try_from(v).map_err(|e| BadBson(e.to_string()))?;
            let (ns, id) = db_pointer_parts(&typed);
            let ref_and_id = |o: &mut String| {
                wrapper(
                    o,
                    dialect,
                    &[
                        ("$ref", &|o: &mut String| write_string(o, &ns)),
                        ("$id", &|o: &mut String| {
                            wrapper(
                                o,
                                dialect,
                                &[("$oid", &|o: &mut String| write_string(o, &id))],
                            )
                        }),
                    ],
                )
            };
            if dialect.relaxed() {
                wrapper(out, dialect, &[("$dbPointer", &ref_and_id)]);
            } else {
                ref_and_id(out);
            }
        }
    }
    Ok(())
}

/// The namespace and ObjectId hex of a (deprecated) DBPointer, which the driver keeps private:
/// read from its BSON encoding (string namespace, then 12 id bytes).
fn db_pointer_parts(v: &Bson) -> (String, String) {
    let mut doc = Document::new();
    doc.insert("p", v.clone());
    let Ok(bytes) = doc.to_vec() else {
        return (String::new(), String::new());
    };
    // int32 length, 0x0C, "p\0", int32 string length, string bytes with NUL, 12 id bytes.
    let parse = || -> Option<(String, String)> {
        let len = i32::from_le_bytes(bytes.get(7..11)?.try_into().ok()?) as usize;
        let ns = std::str::from_utf8(bytes.get(11..11 + len.checked_sub(1)?)?).ok()?;
        let id: [u8; 12] = bytes.get(11 + len..23 + len)?.try_into().ok()?;
        Some((
            ns.to_owned(),
            mongodb::bson::oid::ObjectId::from_bytes(id).to_hex(),
        ))
    };
    parse().unwrap_or_default()
}

/// A double as the Java writer prints it: `Double.toString` with `E+` for positive exponents;
/// non-finite values bare in STRICT mode, as `{"$numberDouble": …}` in RELAXED mode.
fn write_double(out: &mut String, d: f64, dialect: Dialect) {
    if !d.is_finite() && dialect.relaxed() {
        let text = if d.is_nan() {
            "NaN"
        } else if d > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        };
        wrapper(
            out,
            dialect,
            &[("$numberDouble", &|o: &mut String| write_string(o, text))],
        );
        return;
    }
    let number = headwater_api::java::JavaNumber::double(d);
    let text = number.as_str();
    // Java's scientific form starts at 1e7: a positive exponent gets its sign there (a
    // negative one, below 1e-3, starts with '-').
    let scientific = if d.abs() >= 1e7 {
        text.split_once('E')
    } else {
        None
    };
    match scientific {
        Some((mantissa, exponent)) => {
            out.push_str(mantissa);
            out.push_str("E+");
            out.push_str(exponent);
        }
        _ => out.push_str(text),
    }
}

/// Java's `DateTimeFormatter.ISO_OFFSET_DATE_TIME` of a UTC instant in ms: seconds always, the
/// fraction with as many digits as needed (none when zero), `Z`.
fn iso_instant(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let ms_of_day = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let secs = ms_of_day / 1000;
    let frac = ms_of_day % 1000;
    let mut s = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    );
    if frac != 0 {
        let digits = format!("{frac:03}");
        s.push('.');
        s.push_str(digits.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// Whether the Java writer prints `c` (a UTF-16 code unit's character) as is.
fn printable(c: char) -> bool {
    let u = c as u32;
    !(u < 0x20
        || (0x7f..0xa0).contains(&u)
        // Format characters (Cf) Java escapes.
        || u == 0xad
        || (0x600..=0x605).contains(&u)
        || u == 0x61c
        || u == 0x6dd
        || u == 0x70f
        || u == 0x8e2
        || u == 0x180e
        || (0x200b..=0x200f).contains(&u)
        // Line and paragraph separators (Zl, Zp), then more Cf.
        || (0x2028..=0x202e).contains(&u)
        || (0x2060..=0x2064).contains(&u)
        || (0x2066..=0x206f).contains(&u)
        // Private use (Co).
        || (0xe000..=0xf8ff).contains(&u)
        || u == 0xfeff
        || (0xfff9..=0xfffb).contains(&u)
        // Noncharacters (Cn in every Unicode version).
        || u == 0xfffe
        || u == 0xffff)
}

/// A JSON string as the Java writer escapes it.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    // Runs of printable characters other than `"` and `\` are copied as they are; the scan
    // stops at ASCII that needs a look and at every non-ASCII character.
    let mut start = 0;
    let mut i = 0;
    while let Some(at) = scan::find_flagged::<0x7f>(bytes, i) {
        let c = s[at..].chars().next().unwrap_or('\u{FFFD}');
        i = at + c.len_utf8();
        if c as u32 >= 0x80 && (c as u32) < 0x10000 && printable(c) {
            continue;
        }
        out.push_str(&s[start..at]);
        push_char(out, c);
        start = i;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// [`write_string`] of a string that lies inside `container` (a key or a value inside the
/// document being written). A string of up to sixteen bytes with sixteen bytes of `container`
/// from its start is tested in one sixteen-byte step (the bytes after it are masked off) and,
/// when none of it needs a look, copied at once: keys and short values are mostly like that.
#[inline]
fn write_string_in(out: &mut String, s: &str, container: &[u8]) {
    if let Some(offset) = plain_short_offset(s, container) {
        push_quoted_short(out, container, offset, s.len(), []);
    } else {
        write_string(out, s);
    }
}

/// A member's name and the `": "` after it, as [`write_string_in`] writes names.
#[inline]
fn write_key_in(out: &mut String, key: &str, container: &[u8]) {
    if let Some(offset) = plain_short_offset(key, container) {
        push_quoted_short(out, container, offset, key.len(), *b": ");
    } else {
        write_string(out, key);
        out.push_str(": ");
    }
}

/// Where `s` starts in `container` when it is at most sixteen bytes long, sixteen bytes of
/// `container` follow its start, and none of its bytes needs a look (escape or non-ASCII):
/// the string is then written as its bytes between quotes.
#[inline]
fn plain_short_offset(s: &str, container: &[u8]) -> Option<usize> {
    // Where `s` starts inside `container`; a string elsewhere gives an offset past its end
    // (the subtraction wraps), and the bound check sends it to the general path.
    let offset = (s.as_ptr() as usize).wrapping_sub(container.as_ptr() as usize);
    if s.len() <= 16
        && offset
            .checked_add(16)
            .is_some_and(|end| end <= container.len())
    {
        // `s` is `container[offset..offset + s.len()]`; the bytes after it are masked off.
        let own_bytes = (1u32 << s.len()) - 1;
        if scan::flagged_mask16::<0x7f>(container, offset) & own_bytes == 0 {
            return Some(offset);
        }
    }
    None
}

/// Appends `"`, the `len` (≤ 16) bytes of `container` at `offset`, `"` and `tail`, copying
/// sixteen bytes at once (the ones past `len` land in spare capacity and are overwritten or
/// left outside the string). The caller has checked the bytes are ASCII with nothing to
/// escape, and that sixteen bytes of `container` follow `offset`.
#[inline(always)]
fn push_quoted_short<const TAIL: usize>(
    out: &mut String,
    container: &[u8],
    offset: usize,
    len: usize,
    tail: [u8; TAIL],
) {
    const { assert!(TAIL <= 3) };
    assert!(len <= 16);
    let chunk: &[u8; 16] = container[offset..offset + 16]
        .try_into()
        .expect("sixteen bytes");
    out.reserve(1 + 16 + 1 + 3);
    // SAFETY: capacity for 21 more bytes was reserved, and the writes end at most at
    // `1 + 16` and `2 + len + TAIL <= 21` bytes past the current length. The new length
    // covers `"`, `len` ASCII bytes (checked by the caller), `"` and the ASCII `tail`, so the
    // string stays valid UTF-8.
    unsafe {
        let bytes = out.as_mut_vec();
        let at = bytes.len();
        let dst = bytes.as_mut_ptr().add(at);
        dst.write(b'"');
        std::ptr::copy_nonoverlapping(chunk.as_ptr(), dst.add(1), 16);
        dst.add(1 + len).write(b'"');
        std::ptr::copy_nonoverlapping(tail.as_ptr(), dst.add(2 + len), TAIL);
        bytes.set_len(at + 2 + len + TAIL);
    }
}

/// One character as the Java writer writes it inside a string (escaped or as is).
fn push_char(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) >= 0x10000 => {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                push_unicode_escape(out, *u);
            }
        }
        c if printable(c) => out.push(c),
        c => push_unicode_escape(out, c as u16),
    }
}

fn push_unicode_escape(out: &mut String, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[usize::from((unit >> shift) & 0xf)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headwater_tests::rng::Rng;
    use mongodb::bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary, Decimal128, Timestamp};

    /// The former writer, kept as the reference: the driver's iterator and typed values for
    /// every element, recursing itself into documents and arrays.
    fn reference_document(out: &mut String, doc: &RawDocument, dialect: Dialect) {
        out.push('{');
        for (i, element) in doc.iter().enumerate() {
            let (k, v) = element.unwrap();
            if i > 0 {
                out.push_str(dialect.separator());
            }
            reference_string(out, k.as_str());
            out.push_str(": ");
            reference_value(out, v, dialect);
        }
        out.push('}');
    }

    fn reference_value(out: &mut String, v: RawBsonRef<'_>, dialect: Dialect) {
        match v {
            RawBsonRef::Document(d) => reference_document(out, d, dialect),
            RawBsonRef::Array(items) => {
                out.push('[');
                for (i, item) in items.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(dialect.separator());
                    }
                    reference_value(out, item.unwrap(), dialect);
                }
                out.push(']');
            }
            RawBsonRef::String(s) => reference_string(out, s),
            other => write_value(out, other, dialect).unwrap(),
        }
    }

    /// The string writer without its runs of plain ASCII: every character by itself.
    fn reference_string(out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            push_char(out, c);
        }
        out.push('"');
    }

    fn random_text(rng: &mut Rng) -> String {
        const PIECES: &[&str] = &[
            "plain ascii text ",
            "\"",
            "\\",
            "\n",
            "\t",
            "\u{1}",
            "\u{7f}",
            "\u{80}",
            "é",
            "\u{2028}",
            "\u{e000}",
            "\u{1F600}",
            "\u{feff}",
            "日本",
            "x",
            "0123456789abcdef",
        ];
        (0..rng.below(12))
            .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
            .collect()
    }

    fn random_value(rng: &mut Rng, depth: u32) -> Bson {
        let kinds = if depth > 3 { 14 } else { 16 };
        match rng.below(kinds) {
            0 => Bson::Double(f64::from_bits(rng.next_u64())),
            1 => Bson::Double((rng.below(2_000_000) as f64 - 1e6) / 100.0),
            2 => Bson::String(random_text(rng)),
            3 => Bson::Int32(rng.next_u64() as i32),
            4 => Bson::Int64(rng.next_u64() as i64),
            5 => Bson::Boolean(rng.below(2) == 1),
            6 => Bson::Null,
            7 => Bson::ObjectId(ObjectId::from_bytes(
                rng.next_u64().to_le_bytes().repeat(2)[..12]
                    .try_into()
                    .unwrap(),
            )),
            8 => Bson::DateTime(mongodb::bson::DateTime::from_millis(
                rng.next_u64() as i64 % 400_000_000_000_000,
            )),
            9 => Bson::Timestamp(Timestamp {
                time: rng.next_u64() as u32,
                increment: rng.next_u64() as u32,
            }),
            10 => Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: rng.next_u64().to_le_bytes()[..rng.below(8) as usize].to_vec(),
            }),
            11 => Bson::Decimal128("12.50".parse().unwrap()),
            12 => Bson::RegularExpression(mongodb::bson::Regex {
                pattern: random_text(rng).try_into().unwrap(),
                options: "i".try_into().unwrap(),
            }),
            13 => Bson::JavaScriptCode(random_text(rng)),
            14 => Bson::Document(random_document(rng, depth + 1)),
            _ => Bson::Array(
                (0..rng.below(5))
                    .map(|_| random_value(rng, depth + 1))
                    .collect(),
            ),
        }
    }

    fn random_document(rng: &mut Rng, depth: u32) -> Document {
        let mut d = Document::new();
        for i in 0..rng.below(8) {
            d.insert(format!("{}{i}", random_text(rng)), random_value(rng, depth));
        }
        d
    }

    #[test]
    fn byte_walker_writes_what_the_typed_writer_wrote() {
        let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
        for _ in 0..3000 {
            let doc = random_document(&mut rng, 0);
            let raw = RawDocumentBuf::try_from(&doc).unwrap();
            for dialect in [Dialect::Strict, Dialect::RelaxedCompact, Dialect::Relaxed] {
                let mut ours = String::new();
                write_document(&mut ours, &raw, dialect).unwrap();
                let mut want = String::new();
                reference_document(&mut want, &raw, dialect);
                assert_eq!(ours, want, "{doc:?} {dialect:?}");
            }
        }
    }

    #[test]
    fn malformed_bson_is_an_error() {
        let raw = RawDocumentBuf::try_from(&doc! {"a": "text", "b": {"c": true}}).unwrap();
        let mut bytes = raw.as_bytes().to_vec();
        // The boolean's byte (the last value byte before two terminators).
        let at = bytes.len() - 3;
        bytes[at] = 7;
        let doc = RawDocument::from_bytes(&bytes).unwrap();
        let mut out = String::new();
        let err = write_document(&mut out, doc, Dialect::Strict).unwrap_err();
        assert!(err.0.contains("boolean"), "{err}");
    }

    #[test]
    fn the_three_dialects() {
        let d = doc! {
            "_id": ObjectId::parse_str("65f0a1b2c3d4e5f601234567").unwrap(),
            "l": 5i64,
            "d": mongodb::bson::DateTime::from_millis(-315_619_200_000),
            "b": Binary { subtype: BinarySubtype::Generic, bytes: vec![0xff] },
            "f": 1e21,
            "a": [1, "x"],
        };
        assert_eq!(
            document(&d, Dialect::Strict),
            r#"{"_id": {"$oid": "65f0a1b2c3d4e5f601234567"},"l": {"$numberLong": "5"},"d": {"$date": -315619200000},"b": {"$binary": "/w==","$type": "00"},"f": 1.0E+21,"a": [1,"x"]}"#
        );
        assert_eq!(
            document(&d, Dialect::RelaxedCompact),
            r#"{"_id": {"$oid": "65f0a1b2c3d4e5f601234567"},"l": 5,"d": {"$date": {"$numberLong": "-315619200000"}},"b": {"$binary": {"base64": "/w==","subType": "00"}},"f": 1.0E+21,"a": [1,"x"]}"#
        );
        assert_eq!(
            document(&d, Dialect::Relaxed),
            r#"{"_id": {"$oid": "65f0a1b2c3d4e5f601234567"}, "l": 5, "d": {"$date": {"$numberLong": "-315619200000"}}, "b": {"$binary": {"base64": "/w==", "subType": "00"}}, "f": 1.0E+21, "a": [1, "x"]}"#
        );
    }

    #[test]
    fn update_fields_follow_the_field_rules_into_values_set_whole() {
        let rules = crate::fields::FieldRules::for_collection(
            "shop",
            "orders",
            &[
                "shop.orders.customer.ssn".into(),
                "shop.orders.secret".into(),
            ],
            &[("shop.orders.customer.name".into(), "fullName".into())],
        );
        let updated = mongodb::bson::rawdoc! {
            "customer": {"name": "Ada", "ssn": "123"},
            "secret": "x",
            "customer.name": "Bea",
            "v": 2,
        };
        let mut out = String::new();
        write_document_with(&mut out, &updated, Dialect::Relaxed, &rules).unwrap();
        assert_eq!(
            out,
            r#"{"customer": {"fullName": "Ada"}, "customer.fullName": "Bea", "v": 2}"#
        );
    }

    #[test]
    fn scalars() {
        let s = |v: Bson, d| value(&v, d);
        assert_eq!(s(Bson::Double(f64::NAN), Dialect::Strict), "NaN");
        assert_eq!(
            s(Bson::Double(f64::NAN), Dialect::Relaxed),
            r#"{"$numberDouble": "NaN"}"#
        );
        assert_eq!(s(Bson::Double(1e7), Dialect::Strict), "1.0E+7");
        assert_eq!(s(Bson::Double(-2.5e-10), Dialect::Strict), "-2.5E-10");
        assert_eq!(s(Bson::Double(5e-324), Dialect::Strict), "4.9E-324");
        assert_eq!(
            s(
                Bson::DateTime(mongodb::bson::DateTime::from_millis(1_709_214_356_789)),
                Dialect::Relaxed
            ),
            r#"{"$date": "2024-02-29T13:45:56.789Z"}"#
        );
        assert_eq!(
            s(
                Bson::DateTime(mongodb::bson::DateTime::from_millis(1_709_251_200_000)),
                Dialect::Relaxed
            ),
            r#"{"$date": "2024-03-01T00:00:00Z"}"#
        );
        assert_eq!(
            s(
                Bson::Timestamp(Timestamp {
                    time: 1_709_214_356,
                    increment: 7
                }),
                Dialect::Strict
            ),
            r#"{"$timestamp": {"t": 1709214356,"i": 7}}"#
        );
        let dec: Decimal128 = "12.50".parse().unwrap();
        assert_eq!(
            s(Bson::Decimal128(dec), Dialect::Strict),
            r#"{"$numberDecimal": "12.50"}"#
        );
        for text in ["1.000E+6144", "NaN", "-Infinity", "-0.00001"] {
            let dec: Decimal128 = text.parse().unwrap();
            let _ = value(&Bson::Decimal128(dec), Dialect::Strict);
        }
        assert_eq!(
            s(Bson::String("cust-a".into()), Dialect::RelaxedCompact),
            r#""cust-a""#
        );
        assert_eq!(
            s(
                Bson::String("\u{1F600} e, \u{0} n, \u{7f} d, \u{e9} \u{2028}".into()),
                Dialect::Strict
            ),
            r#""\ud83d\ude00 e, \u0000 n, \u007f d, é \u2028""#
        );
    }
}
