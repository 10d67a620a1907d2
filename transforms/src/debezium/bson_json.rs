//! A reader for MongoDB extended JSON, as found in Debezium's MongoDB events: the STRICT
//! (legacy shell) dialect of `before`/`after` (`{"$numberLong": "7"}`, `{"$date": 1709…}`,
//! `{"$binary": "…", "$type": "00"}`, `{"$regex": …, "$options": …}` and bare `NaN` /
//! `Infinity`), and the RELAXED / canonical dialects of `updateDescription.updatedFields` and
//! the key's `id` (`{"$date": "2024-…Z"}`, `{"$binary": {"base64": …, "subType": …}}`,
//! `{"$regularExpression": …}`, `{"$numberDouble": "NaN"}`).
//!
//! Invariants: document member order is kept as written; a plain integer is an int32 when it
//! fits and an int64 otherwise, a number with a fraction or exponent is a double (the Java
//! driver's `JsonReader` rules); an object whose members do not have exactly the shape of a
//! type wrapper is an ordinary document (so a user field named `$regex` or `$d` stays a field).

use base64::Engine;

/// One BSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Bson {
    Null,
    Undefined,
    Boolean(bool),
    Int32(i32),
    Int64(i64),
    Double(f64),
    /// The decimal's text as written (`"12.50"`, `"NaN"`, `"1.000E+6144"`).
    Decimal128(String),
    String(String),
    /// 24 lowercase hex digits.
    ObjectId(String),
    /// Milliseconds since the epoch.
    DateTime(i64),
    Timestamp {
        time: u32,
        increment: u32,
    },
    Binary {
        subtype: u8,
        bytes: Vec<u8>,
    },
    Regex {
        pattern: String,
        options: String,
    },
    JavaScript(String),
    JavaScriptWithScope {
        code: String,
        scope: Document,
    },
    Symbol(String),
    DbPointer {
        namespace: String,
        id: String,
    },
    MinKey,
    MaxKey,
    Document(Document),
    Array(Vec<Bson>),
}

/// A document: members in order.
pub type Document = Vec<(String, Bson)>;

impl Bson {
    /// The BSON type's name, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Bson::Null => "null",
            Bson::Undefined => "undefined",
            Bson::Boolean(_) => "boolean",
            Bson::Int32(_) => "int32",
            Bson::Int64(_) => "int64",
            Bson::Double(_) => "double",
            Bson::Decimal128(_) => "decimal128",
            Bson::String(_) => "string",
            Bson::ObjectId(_) => "objectId",
            Bson::DateTime(_) => "date",
            Bson::Timestamp { .. } => "timestamp",
            Bson::Binary { .. } => "binary",
            Bson::Regex { .. } => "regex",
            Bson::JavaScript(_) => "javascript",
            Bson::JavaScriptWithScope { .. } => "javascriptWithScope",
            Bson::Symbol(_) => "symbol",
            Bson::DbPointer { .. } => "dbPointer",
            Bson::MinKey => "minKey",
            Bson::MaxKey => "maxKey",
            Bson::Document(_) => "document",
            Bson::Array(_) => "array",
        }
    }
}

/// Parses a document (`{...}`), the only top level Debezium writes.
pub fn parse_document(text: &str) -> Result<Document, String> {
    match parse_value(text)? {
        Bson::Document(d) => Ok(d),
        other => Err(format!(
            "expected an extended-JSON document, found a {}",
            other.type_name()
        )),
    }
}

/// Parses any value (`42`, `"text"`, `{"$oid": …}`), as in a key's `id`.
pub fn parse_value(text: &str) -> Result<Bson, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        at: 0,
    };
    p.skip_ws();
    let v = p.value()?;
    p.skip_ws();
    if p.at != p.s.len() {
        return Err(p.error("unexpected text after the value"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> String {
        format!("invalid extended JSON at byte {}: {what}", self.at)
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn expect(&mut self, b: u8) -> Result<(), String> {
        self.skip_ws();
        if self.peek() == Some(b) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected '{}'", b as char)))
        }
    }

    fn keyword(&mut self, word: &str) -> bool {
        if self.s[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Bson, String> {
        self.skip_ws();
        match self.peek() {
            Some(b'{') => {
                self.at += 1;
                let members = self.members()?;
                Ok(wrapper(members))
            }
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if self.peek() == Some(b']') {
                    self.at += 1;
                    return Ok(Bson::Array(items));
                }
                loop {
                    items.push(self.value()?);
                    self.skip_ws();
                    match self.peek() {
                        Some(b',') => self.at += 1,
                        Some(b']') => {
                            self.at += 1;
                            return Ok(Bson::Array(items));
                        }
                        _ => return Err(self.error("expected ',' or ']'")),
                    }
                }
            }
            Some(b'"') => Ok(Bson::String(self.string()?)),
            Some(b't') if self.keyword("true") => Ok(Bson::Boolean(true)),
            Some(b'f') if self.keyword("false") => Ok(Bson::Boolean(false)),
            Some(b'n') if self.keyword("null") => Ok(Bson::Null),
            Some(b'N') if self.keyword("NaN") => Ok(Bson::Double(f64::NAN)),
            Some(b'I') if self.keyword("Infinity") => Ok(Bson::Double(f64::INFINITY)),
            Some(b'-') if self.s[self.at..].starts_with(b"-Infinity") => {
                self.at += "-Infinity".len();
                Ok(Bson::Double(f64::NEG_INFINITY))
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.error("expected a value")),
        }
    }

    fn members(&mut self) -> Result<Document, String> {
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(members);
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a member name"));
            }
            let name = self.string()?;
            self.expect(b':')?;
            let v = self.value()?;
            members.push((name, v));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(members);
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    fn number(&mut self) -> Result<Bson, String> {
        let start = self.at;
        let mut integral = true;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        while let Some(b) = self.peek() {
            match b {
                b'0'..=b'9' => {}
                b'.' | b'e' | b'E' | b'+' | b'-' => integral = false,
                _ => break,
            }
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.at]).unwrap_or("");
        if integral {
            if let Ok(n) = text.parse::<i64>() {
                return Ok(match i32::try_from(n) {
                    Ok(small) => Bson::Int32(small),
                    Err(_) => Bson::Int64(n),
                });
            }
        }
        text.parse::<f64>()
            .map(Bson::Double)
            .map_err(|_| self.error(&format!("invalid number {text:?}")))
    }

    fn string(&mut self) -> Result<String, String> {
        // At the opening quote.
        self.at += 1;
        let mut out = String::new();
        loop {
            let run_start = self.at;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' {
                    break;
                }
                self.at += 1;
            }
            out.push_str(
                std::str::from_utf8(&self.s[run_start..self.at])
                    .map_err(|_| self.error("invalid UTF-8 in a string"))?,
            );
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    let esc = self
                        .peek()
                        .ok_or_else(|| self.error("unterminated escape"))?;
                    self.at += 1;
                    match esc {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'\'' => out.push('\''),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let first = self.hex4()?;
                            let c = if (0xD800..0xDC00).contains(&first)
                                && self.s[self.at..].starts_with(b"\\u")
                            {
                                let save = self.at;
                                self.at += 2;
                                let second = self.hex4()?;
                                if (0xDC00..0xE000).contains(&second) {
                                    char::from_u32(
                                        0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00),
                                    )
                                } else {
                                    self.at = save;
                                    None
                                }
                            } else {
                                char::from_u32(first)
                            };
                            // A lone surrogate cannot be held in a Rust string.
                            out.push(c.unwrap_or('\u{FFFD}'));
                        }
                        _ => return Err(self.error("invalid escape")),
                    }
                }
                _ => return Err(self.error("unterminated string")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self
            .s
            .get(self.at..self.at + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .ok_or_else(|| self.error("invalid \\u escape"))?;
        self.at += 4;
        Ok(digits)
    }
}

fn as_str(v: &Bson) -> Option<&str> {
    match v {
        Bson::String(s) => Some(s),
        _ => None,
    }
}

fn as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.0e15 => Some(*d as i64),
        _ => None,
    }
}

fn b64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

fn hex_byte(s: &str) -> Option<u8> {
    u8::from_str_radix(s, 16).ok()
}

fn member<'a>(m: &'a Document, name: &str) -> Option<&'a Bson> {
    m.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// Turns a parsed object into the value its type wrapper stands for, or a document.
fn wrapper(m: Document) -> Bson {
    let Some((first, _)) = m.first() else {
        return Bson::Document(m);
    };
    if !first.starts_with('$') {
        return Bson::Document(m);
    }
    let one = m.len() == 1;
    let v0 = &m[0].1;
    let parsed = match (first.as_str(), m.len()) {
        ("$oid", 1) => as_str(v0)
            .filter(|h| h.len() == 24 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(|h| Bson::ObjectId(h.to_ascii_lowercase())),
        ("$numberLong", 1) => as_str(v0).and_then(|s| s.parse().ok()).map(Bson::Int64),
        ("$numberInt", 1) => as_str(v0).and_then(|s| s.parse().ok()).map(Bson::Int32),
        ("$numberDouble", 1) => as_str(v0).and_then(|s| match s {
            "NaN" => Some(Bson::Double(f64::NAN)),
            "Infinity" => Some(Bson::Double(f64::INFINITY)),
            "-Infinity" => Some(Bson::Double(f64::NEG_INFINITY)),
            other => other.parse().ok().map(Bson::Double),
        }),
        ("$numberDecimal", 1) => as_str(v0).map(|s| Bson::Decimal128(s.to_owned())),
        ("$date", 1) => match v0 {
            Bson::String(iso) => parse_iso_millis(iso).map(Bson::DateTime),
            Bson::Int64(n) => Some(Bson::DateTime(*n)),
            other => as_i64(other).map(Bson::DateTime),
        },
        ("$binary", 1) => match v0 {
            Bson::Document(inner) => {
                let data = member(inner, "base64").and_then(as_str).and_then(b64);
                let sub = member(inner, "subType").and_then(as_str).and_then(hex_byte);
                match (data, sub, inner.len()) {
                    (Some(bytes), Some(subtype), 2) => Some(Bson::Binary { subtype, bytes }),
                    _ => None,
                }
            }
            _ => None,
        },
        ("$binary", 2) if m[1].0 == "$type" => {
            let data = as_str(v0).and_then(b64);
            let sub = as_str(&m[1].1).and_then(hex_byte);
            match (data, sub) {
                (Some(bytes), Some(subtype)) => Some(Bson::Binary { subtype, bytes }),
                _ => None,
            }
        }
        ("$uuid", 1) => as_str(v0).and_then(|s| {
            let hex: String = s.chars().filter(|c| *c != '-').collect();
            (hex.len() == 32)
                .then(|| {
                    (0..16)
                        .map(|i| hex_byte(&hex[2 * i..2 * i + 2]))
                        .collect::<Option<Vec<u8>>>()
                })
                .flatten()
                .map(|bytes| Bson::Binary { subtype: 4, bytes })
        }),
        ("$regex", 1) | ("$regex", 2) => {
            let options = if one {
                Some(String::new())
            } else if m[1].0 == "$options" {
                as_str(&m[1].1).map(str::to_owned)
            } else {
                None
            };
            match (as_str(v0), options) {
                (Some(p), Some(o)) => Some(Bson::Regex {
                    pattern: p.to_owned(),
                    options: o,
                }),
                _ => None,
            }
        }
        ("$regularExpression", 1) => match v0 {
            Bson::Document(inner) if inner.len() == 2 => {
                match (
                    member(inner, "pattern").and_then(as_str),
                    member(inner, "options").and_then(as_str),
                ) {
                    (Some(p), Some(o)) => Some(Bson::Regex {
                        pattern: p.to_owned(),
                        options: o.to_owned(),
                    }),
                    _ => None,
                }
            }
            _ => None,
        },
        ("$timestamp", 1) => match v0 {
            Bson::Document(inner) if inner.len() == 2 => {
                let t = member(inner, "t").and_then(as_i64);
                let i = member(inner, "i").and_then(as_i64);
                match (t, i) {
                    (Some(t), Some(i)) => Some(Bson::Timestamp {
                        time: t as u32,
                        increment: i as u32,
                    }),
                    _ => None,
                }
            }
            _ => None,
        },
        ("$minKey", 1) => Some(Bson::MinKey),
        ("$maxKey", 1) => Some(Bson::MaxKey),
        ("$undefined", 1) => Some(Bson::Undefined),
        ("$symbol", 1) => as_str(v0).map(|s| Bson::Symbol(s.to_owned())),
        ("$code", 1) => as_str(v0).map(|s| Bson::JavaScript(s.to_owned())),
        ("$code", 2) if m[1].0 == "$scope" => match (as_str(v0), &m[1].1) {
            (Some(code), Bson::Document(scope)) => Some(Bson::JavaScriptWithScope {
                code: code.to_owned(),
                scope: scope.clone(),
            }),
            _ => None,
        },
        ("$dbPointer", 1) => match v0 {
            Bson::Document(inner) => {
                match (member(inner, "$ref").and_then(as_str), member(inner, "$id")) {
                    (Some(ns), Some(Bson::ObjectId(id))) => Some(Bson::DbPointer {
                        namespace: ns.to_owned(),
                        id: id.clone(),
                    }),
                    _ => None,
                }
            }
            _ => None,
        },
        _ => None,
    };
    parsed.unwrap_or(Bson::Document(m))
}

/// `YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)` to epoch milliseconds.
fn parse_iso_millis(s: &str) -> Option<i64> {
    let ts: jiff::Timestamp = s.parse().ok()?;
    Some(ts.as_millisecond())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_dialect_of_after() {
        let d = parse_document(
            r#"{"_id": {"$oid": "65f0a1b2c3d4e5f601234567"},"i": 42,"l": {"$numberLong": "7"},"big": 9223372036854775807,"d": 2.0,"e": 1.0E+21,"nan": NaN,"inf": -Infinity,"dec": {"$numberDecimal": "-0.00001"},"date": {"$date": -1},"bin": {"$binary": "3q2+7wD/","$type": "00"},"re": {"$regex": "^ab.*c$","$options": "im"},"ts": {"$timestamp": {"t": 1709214356,"i": 7}},"code": {"$code": "f()"},"mk": {"$minKey": 1},"ref": {"$ref": "customers","$id": 42,"$db": "shop"},"arr": [1,"two",[]],"s": "a\"\\\n\u2028\ud83d\ude00"}"#,
        )
        .unwrap();
        let get = |k: &str| d.iter().find(|(n, _)| n == k).unwrap().1.clone();
        assert_eq!(
            get("_id"),
            Bson::ObjectId("65f0a1b2c3d4e5f601234567".into())
        );
        assert_eq!(get("i"), Bson::Int32(42));
        assert_eq!(get("l"), Bson::Int64(7));
        assert_eq!(get("big"), Bson::Int64(i64::MAX));
        assert_eq!(get("d"), Bson::Double(2.0));
        assert_eq!(get("e"), Bson::Double(1e21));
        assert!(matches!(get("nan"), Bson::Double(x) if x.is_nan()));
        assert_eq!(get("inf"), Bson::Double(f64::NEG_INFINITY));
        assert_eq!(get("dec"), Bson::Decimal128("-0.00001".into()));
        assert_eq!(get("date"), Bson::DateTime(-1));
        assert_eq!(
            get("bin"),
            Bson::Binary {
                subtype: 0,
                bytes: vec![0xde, 0xad, 0xbe, 0xef, 0x00, 0xff]
            }
        );
        assert_eq!(
            get("re"),
            Bson::Regex {
                pattern: "^ab.*c$".into(),
                options: "im".into()
            }
        );
        assert_eq!(
            get("ts"),
            Bson::Timestamp {
                time: 1709214356,
                increment: 7
            }
        );
        assert_eq!(get("code"), Bson::JavaScript("f()".into()));
        assert_eq!(get("mk"), Bson::MinKey);
        assert!(matches!(get("ref"), Bson::Document(m) if m.len() == 3 && m[0].0 == "$ref"));
        assert_eq!(
            get("arr"),
            Bson::Array(vec![
                Bson::Int32(1),
                Bson::String("two".into()),
                Bson::Array(vec![])
            ])
        );
        assert_eq!(get("s"), Bson::String("a\"\\\n\u{2028}\u{1F600}".into()));
        // Order kept.
        assert_eq!(d[0].0, "_id");
        assert_eq!(d.last().unwrap().0, "s");
    }

    #[test]
    fn relaxed_dialect_of_updated_fields_and_keys() {
        let d = parse_document(
            r#"{"d": {"$date": "2024-02-29T13:45:56.789Z"}, "old": {"$date": {"$numberLong": "-315619200000"}}, "b": {"$binary": {"base64": "oO68mZwLTvi7bWu5vTgKEQ==", "subType": "04"}}, "r": {"$regularExpression": {"pattern": "a.c", "options": "i"}}, "n": {"$numberDouble": "NaN"}}"#,
        )
        .unwrap();
        assert_eq!(d[0].1, Bson::DateTime(1709214356789));
        assert_eq!(d[1].1, Bson::DateTime(-315619200000));
        assert!(matches!(&d[2].1, Bson::Binary { subtype: 4, bytes } if bytes.len() == 16));
        assert_eq!(
            d[3].1,
            Bson::Regex {
                pattern: "a.c".into(),
                options: "i".into()
            }
        );
        assert!(matches!(d[4].1, Bson::Double(x) if x.is_nan()));
        assert_eq!(
            parse_value(r#""cust-a""#).unwrap(),
            Bson::String("cust-a".into())
        );
        assert_eq!(
            parse_value("1099511627776").unwrap(),
            Bson::Int64(1099511627776)
        );
        assert_eq!(
            parse_value(r#"{"region": "eu","no": 7}"#).unwrap(),
            Bson::Document(vec![
                ("region".into(), Bson::String("eu".into())),
                ("no".into(), Bson::Int32(7))
            ])
        );
    }

    #[test]
    fn lookalike_objects_stay_documents() {
        let d =
            parse_document(r#"{"q": {"$regex": {"$in": [1]}}, "x": {"$d": 1}, "y": {"$oid": 5}}"#)
                .unwrap();
        assert!(matches!(&d[0].1, Bson::Document(m) if m[0].0 == "$regex"));
        assert!(matches!(&d[1].1, Bson::Document(m) if m[0].0 == "$d"));
        assert!(matches!(&d[2].1, Bson::Document(m) if m[0].0 == "$oid"));
    }

    #[test]
    fn malformed_text_is_an_error() {
        for bad in [
            "{",
            r#"{"a" 1}"#,
            r#"{"a": tru}"#,
            r#"{"a": 1} x"#,
            "[1]",
            r#"{"a": "\x"}"#,
        ] {
            assert!(parse_document(bad).is_err(), "{bad}");
        }
    }
}
