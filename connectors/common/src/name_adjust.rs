//! Debezium's `schema.name.adjustment.mode` and `field.name.adjustment.mode`, exactly as
//! Debezium's `SchemaNameAdjuster` does them:
//! - `avro`: each character Avro does not allow becomes `_` (a leading digit is kept after a
//!   `_`, so `1a` and `2a` stay apart);
//! - `avro_unicode`: each character outside `[a-zA-Z]` (first) or `[a-zA-Z0-9]` (others; `.`
//!   too in schema names) becomes `_u` and its UTF-16 code in lower-case hex, padded to four
//!   digits only when it has one or two (`_` → `_u005f`, `语` → `_u8bed`, U+0100 → `_u100`:
//!   Debezium's padding), each unit of a character outside the BMP on its own, so distinct
//!   names stay distinct.
//!
//! Invariant: a name that is already valid comes back unchanged (borrowed).

use std::borrow::Cow;

/// `none` (Debezium's default) or `avro`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NameAdjustment {
    #[default]
    None,
    Avro,
    AvroUnicode,
}

impl NameAdjustment {
    /// Reads a mode (case-insensitive); `None` back for a value that is not built.
    pub fn parse(mode: &str) -> Option<NameAdjustment> {
        match mode.trim().to_ascii_lowercase().as_str() {
            "" | "none" => Some(NameAdjustment::None),
            "avro" => Some(NameAdjustment::Avro),
            "avro_unicode" => Some(NameAdjustment::AvroUnicode),
            _ => None,
        }
    }

    /// A schema's full name (dots separate its parts and are kept).
    pub fn schema_name<'a>(self, name: &'a str) -> Cow<'a, str> {
        self.adjust(name, true)
    }

    /// A field's name (a dot is replaced too).
    pub fn field_name<'a>(self, name: &'a str) -> Cow<'a, str> {
        self.adjust(name, false)
    }

    fn adjust<'a>(self, name: &'a str, dots: bool) -> Cow<'a, str> {
        match self {
            NameAdjustment::None => return Cow::Borrowed(name),
            NameAdjustment::AvroUnicode => return unicode_escaped(name, dots),
            NameAdjustment::Avro => {}
        }
        let first_ok = |c: char| c.is_ascii_alphabetic() || c == '_';
        let rest_ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || (dots && c == '.');
        let mut chars = name.chars();
        let Some(first) = chars.next() else {
            return Cow::Borrowed(name);
        };
        if first_ok(first) && chars.clone().all(rest_ok) {
            return Cow::Borrowed(name);
        }
        let mut out = String::with_capacity(name.len() + 1);
        if first_ok(first) {
            out.push(first);
        } else {
            out.push('_');
            if first.is_ascii_digit() {
                out.push(first);
            } else if first.len_utf16() == 2 {
                // Java replaced the low surrogate too.
                out.push('_');
            }
        }
        // Java walks UTF-16 units: a character outside the BMP is two replaced units.
        for c in chars {
            if rest_ok(c) {
                out.push(c);
            } else {
                for _ in 0..c.len_utf16() {
                    out.push('_');
                }
            }
        }
        Cow::Owned(out)
    }
}

/// `avro_unicode`'s adjustment (see the module doc).
fn unicode_escaped(name: &str, dots: bool) -> Cow<'_, str> {
    let valid = |i: usize, c: char| {
        c.is_ascii_alphabetic() || (i > 0 && (c.is_ascii_digit() || (dots && c == '.')))
    };
    if name.chars().enumerate().all(|(i, c)| valid(i, c)) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for (i, c) in name.chars().enumerate() {
        if valid(i, c) {
            out.push(c);
            continue;
        }
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            let hex = format!("{unit:x}");
            out.push_str("_u");
            if hex.len() <= 2 {
                out.push_str("00");
            }
            out.push_str(&hex);
        }
    }
    Cow::Owned(out)
}

/// A connector's `schema.name.adjustment.mode` and `field.name.adjustment.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NameAdjustments {
    pub schema: NameAdjustment,
    pub field: NameAdjustment,
}

impl NameAdjustments {
    /// From a configuration whose values were validated (an unknown mode reads as `none`).
    pub fn from_props(props: &headwater_api::Properties) -> NameAdjustments {
        let mode = |k: &str| {
            props
                .get(k)
                .and_then(|v| NameAdjustment::parse(v))
                .unwrap_or_default()
        };
        NameAdjustments {
            schema: mode("schema.name.adjustment.mode"),
            field: mode("field.name.adjustment.mode"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avro_names_as_debezium_adjusts_them() {
        let a = NameAdjustment::Avro;
        assert_eq!(
            a.schema_name("my-server.public.t.Value"),
            "my_server.public.t.Value"
        );
        assert!(matches!(
            a.schema_name("cdc.public.t.Value"),
            Cow::Borrowed(_)
        ));
        assert_eq!(a.schema_name("1st.db.t"), "_1st.db.t");
        assert_eq!(a.field_name("first name"), "first_name");
        assert_eq!(a.field_name("a.b"), "a_b");
        assert_eq!(a.field_name("9lives"), "_9lives");
        assert_eq!(a.field_name("€uro"), "_uro");
        assert_eq!(a.field_name("x😀"), "x__");
        assert_eq!(a.field_name("😀x"), "__x");
        assert_eq!(NameAdjustment::None.field_name("first name"), "first name");
        assert_eq!(NameAdjustment::parse("AVRO"), Some(NameAdjustment::Avro));
        assert_eq!(
            NameAdjustment::parse("Avro_Unicode"),
            Some(NameAdjustment::AvroUnicode)
        );
        assert_eq!(NameAdjustment::parse("other"), None);
    }

    #[test]
    fn avro_unicode_names_as_debezium_escapes_them() {
        let u = NameAdjustment::AvroUnicode;
        // Debezium's own example (SchemaNameAdjusterTest).
        assert_eq!(
            u.schema_name("_hello_语言."),
            "_u005fhello_u005f_u8bed_u8a00."
        );
        assert!(matches!(
            u.schema_name("cdc.public.t.Value"),
            Cow::Borrowed(_)
        ));
        assert_eq!(u.schema_name("my-server.t"), "my_u002dserver.t");
        assert_eq!(u.field_name("a.b"), "a_u002eb");
        assert_eq!(u.field_name("first_name"), "first_u005fname");
        assert_eq!(u.field_name("9lives"), "_u0039lives");
        assert_eq!(
            u.field_name("a\nb"),
            "a_u00ab",
            "Debezium pads one digit to three"
        );
        assert_eq!(u.field_name("xĀ"), "x_u100", "and three digits not at all");
        assert_eq!(u.field_name("x😀"), "x_ud83d_ude00");
    }
}
