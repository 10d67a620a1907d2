//! Debezium's `schema.name.adjustment.mode` and `field.name.adjustment.mode` in their `avro`
//! form: schema and field names made valid Avro names by replacing each character Avro does not
//! allow with `_` (a leading digit is kept after a `_`, so `1a` and `2a` stay apart), exactly as
//! Debezium's `SchemaNameAdjuster` with its underscore replacement does.
//!
//! Invariant: a name that is already valid comes back unchanged (borrowed).

use std::borrow::Cow;

/// `none` (Debezium's default) or `avro`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NameAdjustment {
    #[default]
    None,
    Avro,
}

impl NameAdjustment {
    /// Reads a mode (case-insensitive); `None` back for a value that is not built.
    pub fn parse(mode: &str) -> Option<NameAdjustment> {
        match mode.trim().to_ascii_lowercase().as_str() {
            "" | "none" => Some(NameAdjustment::None),
            "avro" => Some(NameAdjustment::Avro),
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
        if self == NameAdjustment::None {
            return Cow::Borrowed(name);
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
        assert_eq!(NameAdjustment::parse("avro_unicode"), None);
    }
}
