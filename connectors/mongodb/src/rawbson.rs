//! A minimal walker over BSON bytes: a document's elements as (key, type byte, value bytes)
//! without decoding the values, for the per-event hot path (rendering change events and
//! snapshot documents as extended JSON, finding a change event's top-level fields).
//!
//! The driver's raw iterator does the same job with more per-element work (it checks each key
//! through a general UTF-8 validator and builds a typed value per element); rendering ~1 KB
//! documents spent most of its time there. This walker reads sizes straight from the bytes.
//!
//! Invariants: an element's value bytes are exactly its value's extent by the BSON size rules
//! and lie inside its document; keys and string values handed out are valid UTF-8; a document
//! whose declared length, terminator, element types or sizes do not hold is a [`BadBson`]
//! error, never read past.

use crate::extjson::BadBson;

pub const DOUBLE: u8 = 0x01;
pub const STRING: u8 = 0x02;
pub const DOCUMENT: u8 = 0x03;
pub const ARRAY: u8 = 0x04;
pub const BINARY: u8 = 0x05;
pub const UNDEFINED: u8 = 0x06;
pub const OBJECT_ID: u8 = 0x07;
pub const BOOLEAN: u8 = 0x08;
pub const DATETIME: u8 = 0x09;
pub const NULL: u8 = 0x0A;
pub const REGEX: u8 = 0x0B;
pub const DB_POINTER: u8 = 0x0C;
pub const CODE: u8 = 0x0D;
pub const SYMBOL: u8 = 0x0E;
pub const CODE_WITH_SCOPE: u8 = 0x0F;
pub const INT32: u8 = 0x10;
pub const TIMESTAMP: u8 = 0x11;
pub const INT64: u8 = 0x12;
pub const DECIMAL128: u8 = 0x13;
pub const MIN_KEY: u8 = 0xFF;
pub const MAX_KEY: u8 = 0x7F;

/// One element of a document.
#[derive(Clone, Copy, Debug)]
pub struct Element<'a> {
    pub key: &'a str,
    /// The BSON type byte.
    pub kind: u8,
    /// The value's bytes (for documents and arrays: the whole embedded document).
    pub value: &'a [u8],
}

/// The elements of one document, in stored order.
pub struct Elements<'a> {
    doc: &'a [u8],
    at: usize,
    failed: bool,
}

fn bad(what: impl Into<String>) -> BadBson {
    BadBson(what.into())
}

fn read_i32(bytes: &[u8], at: usize) -> Result<i32, BadBson> {
    bytes
        .get(at..at + 4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| bad("a length runs past the end of its document"))
}

/// The elements of the document `doc` (its length prefix, elements and terminator).
pub fn elements(doc: &[u8]) -> Result<Elements<'_>, BadBson> {
    let declared = read_i32(doc, 0)?;
    if doc.len() < 5 || declared as usize != doc.len() || declared < 5 {
        return Err(bad(format!(
            "a document declares {declared} bytes but has {}",
            doc.len()
        )));
    }
    if doc[doc.len() - 1] != 0 {
        return Err(bad("a document is not null-terminated"));
    }
    Ok(Elements {
        doc,
        at: 4,
        failed: false,
    })
}

/// The elements of the document `doc` from the element that starts at `at` (an offset
/// [`Elements::offset`] gave for the same document) on.
pub fn elements_from(doc: &[u8], at: usize) -> Result<Elements<'_>, BadBson> {
    let mut elements = elements(doc)?;
    elements.at = at.max(4);
    Ok(elements)
}

impl Elements<'_> {
    /// Where the next element starts in the document.
    pub fn offset(&self) -> usize {
        self.at
    }
}

/// A NUL-terminated UTF-8 string starting at `at`: the text and the index after its NUL.
fn cstring(bytes: &[u8], at: usize) -> Result<(&str, usize), BadBson> {
    if at + 16 <= bytes.len() {
        // Keys are short and ASCII: one sixteen-byte step finds the NUL and checks the bytes
        // before it.
        let (zeros, non_ascii) = headwater_api::scan::zero_and_non_ascii_mask16(bytes, at);
        if zeros != 0 {
            let len = zeros.trailing_zeros() as usize;
            if non_ascii & ((1 << len) - 1) == 0 {
                let raw = &bytes[at..at + len];
                // SAFETY: ASCII bytes (none of them has its high bit set) are valid UTF-8.
                let text = unsafe { std::str::from_utf8_unchecked(raw) };
                return Ok((text, at + len + 1));
            }
        }
    }
    let rest = bytes.get(at..).unwrap_or_default();
    let len = rest
        .iter()
        .position(|b| *b == 0)
        .ok_or_else(|| bad("a key or pattern is not null-terminated"))?;
    let raw = &rest[..len];
    let text = if raw.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8. Keys are nearly always ASCII, and the general
        // check costs more than this one on such short strings.
        unsafe { std::str::from_utf8_unchecked(raw) }
    } else {
        std::str::from_utf8(raw).map_err(|e| bad(format!("a key: {e}")))?
    };
    Ok((text, at + len + 1))
}

/// How a value of a type is sized.
#[derive(Clone, Copy)]
enum SizeRule {
    /// Always this many bytes.
    Fixed(usize),
    /// A little-endian `i32` length prefix, plus this many bytes the prefix does not count.
    Prefixed(usize),
    /// Neither: REGEX (two C strings) and unknown types.
    Other,
}

#[inline]
fn size_rule(kind: u8) -> SizeRule {
    match kind {
        DOUBLE | DATETIME | TIMESTAMP | INT64 => SizeRule::Fixed(8),
        INT32 => SizeRule::Fixed(4),
        BOOLEAN => SizeRule::Fixed(1),
        OBJECT_ID => SizeRule::Fixed(12),
        DECIMAL128 => SizeRule::Fixed(16),
        NULL | UNDEFINED | MIN_KEY | MAX_KEY => SizeRule::Fixed(0),
        STRING | CODE | SYMBOL => SizeRule::Prefixed(4),
        DOCUMENT | ARRAY | CODE_WITH_SCOPE => SizeRule::Prefixed(0),
        BINARY => SizeRule::Prefixed(5),
        DB_POINTER => SizeRule::Prefixed(4 + 12),
        _ => SizeRule::Other,
    }
}

/// The size of a value of type `kind` that starts at `at` of `bytes`.
fn value_len(kind: u8, bytes: &[u8], at: usize) -> Result<usize, BadBson> {
    Ok(match size_rule(kind) {
        SizeRule::Fixed(len) => len,
        SizeRule::Prefixed(extra) => {
            let n = read_i32(bytes, at)?;
            usize::try_from(n)
                .map(|n| n + extra)
                .map_err(|_| bad("a negative length"))?
        }
        SizeRule::Other if kind == REGEX => {
            let (_, after_pattern) = cstring(bytes, at)?;
            let (_, after_options) = cstring(bytes, after_pattern)?;
            after_options - at
        }
        SizeRule::Other => return Err(bad(format!("invalid element type 0x{kind:02x}"))),
    })
}

impl<'a> Elements<'a> {
    /// The general step, for what [`Iterator::next`]'s fast path does not take: keys near
    /// the document's end or not ASCII, regular expressions, and every malformed element
    /// (whose error it reports).
    #[cold]
    #[inline(never)]
    fn next_slow(&mut self) -> Option<Result<Element<'a>, BadBson>> {
        if self.failed {
            return None;
        }
        let end = self.doc.len() - 1;
        if self.at >= end {
            if self.at != end {
                self.failed = true;
                return Some(Err(bad("an element runs past the end of its document")));
            }
            return None;
        }
        let step = || -> Result<(Element<'a>, usize), BadBson> {
            let kind = self.doc[self.at];
            let (key, value_at) = cstring(&self.doc[..end], self.at + 1)?;
            let len = value_len(kind, &self.doc[..end], value_at)?;
            let value = self
                .doc
                .get(value_at..value_at + len)
                .filter(|_| value_at + len <= end)
                .ok_or_else(|| bad(format!("the value of {key:?} runs past its document")))?;
            Ok((Element { key, kind, value }, value_at + len))
        };
        match step() {
            Ok((element, next)) => {
                self.at = next;
                Some(Ok(element))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = Result<Element<'a>, BadBson>;

    /// The fast path, straight-line for the common element: an ASCII key found in one
    /// sixteen-byte step and a value of fixed size or with a length prefix, inside the
    /// document. Anything else (and every check that fails) goes to [`Elements::next_slow`],
    /// which walks the same element with the general rules, so both give the same result.
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let doc = self.doc;
        let end = doc.len() - 1;
        let at = self.at;
        // `failed` keeps `at` where the failing element began, so this test is not enough
        // alone; the slow path checks `failed` first.
        if self.failed || at >= end {
            if at == end && !self.failed {
                return None; // the terminator: every document's last step
            }
            return self.next_slow();
        }
        let kind = doc[at];
        let key_len = if at + 17 <= end {
            let (zeros, non_ascii) = headwater_api::scan::zero_and_non_ascii_mask16(doc, at + 1);
            let key_len = zeros.trailing_zeros() as usize; // 32 when no NUL in the step
            if key_len >= 16 || non_ascii & ((1u32 << key_len) - 1) != 0 {
                return self.next_slow();
            }
            key_len
        } else {
            // Near the document's end (the last members of small documents): byte by byte.
            let rest = &doc[at + 1..end];
            match rest.iter().position(|b| *b == 0 || *b >= 0x80) {
                Some(len) if rest[len] == 0 => len,
                _ => return self.next_slow(),
            }
        };
        let value_at = at + 1 + key_len + 1;
        let len = match size_rule(kind) {
            SizeRule::Fixed(len) => len,
            SizeRule::Prefixed(extra) => {
                let Some(prefix) = doc[..end].get(value_at..value_at + 4) else {
                    return self.next_slow();
                };
                let n = i32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
                if n < 0 {
                    return self.next_slow();
                }
                n as usize + extra
            }
            SizeRule::Other => return self.next_slow(),
        };
        let value_end = value_at + len;
        if value_end > end {
            return self.next_slow();
        }
        // SAFETY: the key's bytes are ASCII (checked above), which is valid UTF-8.
        let key = unsafe { std::str::from_utf8_unchecked(&doc[at + 1..at + 1 + key_len]) };
        self.at = value_end;
        Some(Ok(Element {
            key,
            kind,
            value: &doc[value_at..value_end],
        }))
    }
}

/// A string value's text (STRING, CODE and SYMBOL values).
pub fn string(value: &[u8]) -> Result<&str, BadBson> {
    let len = read_i32(value, 0)?;
    if len < 1 || value.len() != 4 + len as usize || value[value.len() - 1] != 0 {
        return Err(bad("a string's length or terminator is wrong"));
    }
    let raw = &value[4..value.len() - 1];
    if raw.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8. Most strings are ASCII, and this check runs
        // many bytes per step where the general validator goes nearly byte by byte.
        return Ok(unsafe { std::str::from_utf8_unchecked(raw) });
    }
    std::str::from_utf8(raw).map_err(|e| bad(format!("a string: {e}")))
}

/// An 8-byte little-endian integer value (INT64, DATETIME).
pub fn int64(value: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&value[..8]);
    i64::from_le_bytes(b)
}

/// A 4-byte little-endian integer value (INT32).
pub fn int32(value: &[u8]) -> i32 {
    i32::from_le_bytes([value[0], value[1], value[2], value[3]])
}

/// A TIMESTAMP value as (time, increment).
pub fn timestamp(value: &[u8]) -> (u32, u32) {
    let increment = u32::from_le_bytes([value[0], value[1], value[2], value[3]]);
    let time = u32::from_le_bytes([value[4], value[5], value[6], value[7]]);
    (time, increment)
}

/// The first element named `key` of the document `doc`.
pub fn find<'a>(doc: &'a [u8], key: &str) -> Result<Option<Element<'a>>, BadBson> {
    for e in elements(doc)? {
        let e = e?;
        if e.key == key {
            return Ok(Some(e));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary, Regex, Timestamp};
    use mongodb::bson::{RawBsonRef, RawDocumentBuf};

    #[test]
    fn elements_agree_with_the_driver() {
        let d = doc! {
            "s": "text", "i": 7, "l": 8i64, "f": 2.5, "b": true, "n": null,
            "o": ObjectId::new(), "d": mongodb::bson::DateTime::from_millis(5),
            "t": Timestamp { time: 9, increment: 3 },
            "bin": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "re": Regex { pattern: "a.c".try_into().unwrap(), options: "i".try_into().unwrap() },
            "sub": {"x": [1, {"y": "z"}]}, "ü": "é",
        };
        let raw = RawDocumentBuf::try_from(&d).unwrap();
        let ours: Vec<(String, u8, usize)> = elements(raw.as_bytes())
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.key.to_owned(), e.kind, e.value.len()))
            .collect();
        let driver: Vec<String> = raw
            .iter()
            .map(|e| e.unwrap().0.as_str().to_owned())
            .collect();
        assert_eq!(ours.iter().map(|o| o.0.clone()).collect::<Vec<_>>(), driver);
        let s = find(raw.as_bytes(), "s").unwrap().unwrap();
        assert_eq!(string(s.value).unwrap(), "text");
        let t = find(raw.as_bytes(), "t").unwrap().unwrap();
        assert_eq!(timestamp(t.value), (9, 3));
        let sub = find(raw.as_bytes(), "sub").unwrap().unwrap();
        match raw.get("sub").unwrap() {
            Some(RawBsonRef::Document(doc)) => assert_eq!(doc.as_bytes(), sub.value),
            other => panic!("{other:?}"),
        }
        assert!(find(raw.as_bytes(), "missing").unwrap().is_none());
    }

    #[test]
    fn malformed_documents_are_errors_not_reads_past_the_end() {
        let raw = RawDocumentBuf::try_from(&doc! {"a": "bc", "d": {"e": 1}}).unwrap();
        let bytes = raw.as_bytes().to_vec();
        // Every truncation and every single-byte corruption either walks or errors.
        for cut in 0..bytes.len() {
            let mut b = bytes[..cut].to_vec();
            if b.len() >= 4 {
                b[..4].copy_from_slice(&(cut as i32).to_le_bytes());
            }
            if let Ok(it) = elements(&b) {
                let _ = it.collect::<Vec<_>>();
            }
        }
        let mut errors = 0;
        for i in 4..bytes.len() {
            for v in [0u8, 0x7f, 0xff, 0x13, 0x40] {
                let mut b = bytes.clone();
                b[i] = v;
                match elements(&b) {
                    Ok(it) => {
                        for e in it {
                            match e {
                                Ok(e) if e.kind == STRING => {
                                    let _ = string(e.value);
                                }
                                Ok(e) if e.kind == DOCUMENT => {
                                    if elements(e.value).is_err() {
                                        errors += 1;
                                    }
                                }
                                Ok(_) => {}
                                Err(_) => errors += 1,
                            }
                        }
                    }
                    Err(_) => errors += 1,
                }
            }
        }
        assert!(errors > 10, "{errors} corruptions were reported");
        let mut b = bytes.clone();
        b[4] = 0x42;
        assert!(elements(&b).unwrap().any(|e| e.is_err()), "an unknown type");
    }

    /// Every element as (key, type, value) or its error, walked by `step`.
    type Walked = Vec<Result<(String, u8, Vec<u8>), BadBson>>;

    fn walk(doc: &[u8], general_only: bool) -> Result<Walked, BadBson> {
        let mut it = elements(doc)?;
        let mut out = Vec::new();
        loop {
            let next = if general_only {
                it.next_slow()
            } else {
                it.next()
            };
            match next {
                Some(e) => out.push(e.map(|e| (e.key.to_owned(), e.kind, e.value.to_vec()))),
                None => return Ok(out),
            }
        }
    }

    #[test]
    fn the_fast_step_and_the_general_step_agree_on_every_corruption() {
        let raw = RawDocumentBuf::try_from(&doc! {
            "k": "v", "a_key_of_15_byt": 1, "a_key_of_16_bytes": 2i64, "a_key_of_seventeen": 2.5,
            "ü": "é", "o": ObjectId::new(), "t": true, "n": null,
            "bin": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "re": Regex { pattern: "a.c".try_into().unwrap(), options: "i".try_into().unwrap() },
            "sub": {"x": [1, {"y": "z"}]}, "last": "a string at the very end",
        })
        .unwrap();
        let bytes = raw.as_bytes().to_vec();
        let agree = |b: &[u8]| assert_eq!(walk(b, false), walk(b, true), "{b:?}");
        agree(&bytes);
        assert!(walk(&bytes, false).unwrap().iter().all(|e| e.is_ok()));
        for cut in 5..bytes.len() {
            let mut b = bytes[..cut].to_vec();
            b[..4].copy_from_slice(&(cut as i32).to_le_bytes());
            agree(&b);
        }
        for i in 4..bytes.len() {
            for v in [0u8, 1, 0x02, 0x03, 0x05, 0x0b, 0x13, 0x40, 0x7f, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] = v;
                agree(&b);
            }
        }
    }

    /// A string value as BSON stores it: length (with the NUL), bytes, NUL.
    fn string_value(text: &[u8]) -> Vec<u8> {
        let mut v = ((text.len() + 1) as i32).to_le_bytes().to_vec();
        v.extend_from_slice(text);
        v.push(0);
        v
    }

    #[test]
    fn strings_are_valid_utf8_or_errors_whatever_their_length() {
        for len in [0usize, 1, 7, 15, 16, 17, 31, 64, 600] {
            let ascii = "x".repeat(len);
            assert_eq!(string(&string_value(ascii.as_bytes())).unwrap(), ascii);
            let mixed = format!("{ascii}é€𝄞");
            assert_eq!(string(&string_value(mixed.as_bytes())).unwrap(), mixed);
            // Invalid sequences anywhere (a lone continuation byte, a truncated
            // multi-byte character, an overlong encoding) are refused.
            for bad in [&[0x80u8][..], &[0xE2, 0x82], &[0xC0, 0xAF]] {
                let mut at_end = ascii.as_bytes().to_vec();
                at_end.extend_from_slice(bad);
                assert!(string(&string_value(&at_end)).is_err(), "{len} {bad:?}");
                let mut at_start = bad.to_vec();
                at_start.extend_from_slice(ascii.as_bytes());
                assert!(string(&string_value(&at_start)).is_err(), "{len} {bad:?}");
            }
        }
    }
}
