//! Debezium's include/exclude lists: comma-separated regular expressions (a comma inside a
//! pattern is written `\,`), each matched case-insensitively against the whole qualified name
//! (`schema.table`, `db.table.column`, ...). Used by every source connector's filters.
//!
//! Invariant: a pattern only ever matches a whole name (it is compiled as `(?i)^(?:p)$`).

use regex::Regex;

/// Splits a list on unescaped commas, unescaping `\,`, trimming items and dropping empty ones.
pub fn split_list(raw: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek() == Some(&',') {
            cur.push(',');
            chars.next();
        } else if c == ',' {
            items.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    items.push(cur);
    items
        .into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A compiled list of anchored, case-insensitive patterns.
#[derive(Clone, Debug)]
pub struct PatternList {
    patterns: Vec<Regex>,
}

impl PatternList {
    /// Compiles a raw list; the error names the pattern that does not compile.
    pub fn parse(raw: &str) -> Result<PatternList, String> {
        let mut patterns = Vec::new();
        for p in split_list(raw) {
            let re = Regex::new(&format!("(?i)^(?:{p})$"))
                .map_err(|e| format!("invalid regular expression {p:?}: {e}"))?;
            patterns.push(re);
        }
        Ok(PatternList { patterns })
    }
    /// A list of literal names (Debezium's `filters.match.mode=literal`): each item matches
    /// only the name it spells, compared case-insensitively like the patterns.
    pub fn literals(raw: &str) -> PatternList {
        let patterns = split_list(raw)
            .iter()
            .map(|name| {
                Regex::new(&format!("(?i)^(?:{})$", regex::escape(name)))
                    .expect("an escaped literal always compiles")
            })
            .collect();
        PatternList { patterns }
    }
    /// The index of the first pattern matching `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.patterns.iter().position(|p| p.is_match(name))
    }
    pub fn matches(&self, name: &str) -> bool {
        self.position(name).is_some()
    }
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }
    /// Appends another list's patterns after this one's.
    pub fn extend(&mut self, other: PatternList) {
        self.patterns.extend(other.patterns);
    }
}

/// An include list, an exclude list, or neither.
#[derive(Clone, Debug, Default)]
pub enum Selector {
    #[default]
    All,
    Include(PatternList),
    Exclude(PatternList),
}

impl Selector {
    pub fn accepts(&self, name: &str) -> bool {
        match self {
            Selector::All => true,
            Selector::Include(p) => p.matches(name),
            Selector::Exclude(p) => !p.matches(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_anchored_case_insensitive_and_split_on_unescaped_commas() {
        assert_eq!(split_list(" a , b\\,c ,,"), ["a", "b,c"]);
        let p = PatternList::parse("public.orders,public\\.cust.*").unwrap();
        assert!(p.matches("PUBLIC.ORDERS"));
        assert!(!p.matches("public.orders2"));
        assert!(!p.matches("xpublic.orders"));
        let l = PatternList::literals("shop.orders, shop.c.*");
        assert!(l.matches("SHOP.orders"));
        assert!(l.matches("shop.c.*"));
        assert!(!l.matches("shop.customers"));
        assert!(!l.matches("shopxorders"));
        assert_eq!(p.position("public.customers"), Some(1));
        assert!(PatternList::parse("a(").is_err());
        assert!(Selector::All.accepts("x"));
        assert!(!Selector::Exclude(PatternList::parse("x").unwrap()).accepts("X"));
        assert!(Selector::Include(PatternList::parse("x").unwrap()).accepts("X"));
    }
}
