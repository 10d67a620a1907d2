//! Java `java.util.regex` semantics on top of `fancy-regex`: pattern translation, the
//! whole-input match (`Matcher.matches()`), and `Matcher.replaceFirst` with Java's replacement
//! grammar, parsed by our own code (the Rust crates' `$name` rules differ from Java's).
//!
//! Translation covers what users write in topic-routing patterns: `\Q...\E` quoting,
//! possessive quantifiers (`*+`, `++`, `?+`, `{n,m}+`, rewritten to atomic groups), Java's `\h`
//! / `\v` whitespace classes and the ASCII POSIX classes `\p{Lower}`, `\p{Alpha}`, ...
//! Named groups `(?<name>...)`, look-around, lazy quantifiers, back-references and atomic groups
//! are native to fancy-regex. Known gaps (reported as a compile error, never silently different):
//! `\H`/`\V` inside a character class, and Java-only `\p{javaXxx}` classes.
//!
//! Invariant: a [`JavaRegex`] is compiled twice, once as written (for `find`, which
//! `replaceFirst` uses) and once anchored as `\A(?:...)\z` (for `matches`); both have the same
//! groups, numbered as Java numbers them.

use fancy_regex::Regex;

/// A compiled Java regular expression.
#[derive(Debug, Clone)]
pub struct JavaRegex {
    source: String,
    find: Regex,
    whole: Regex,
    group_count: usize,
    group_names: Vec<(String, usize)>,
}

impl JavaRegex {
    /// Compiles a Java pattern; the error text describes the problem (as in `Pattern.compile`).
    pub fn compile(pattern: &str) -> Result<JavaRegex, String> {
        let translated = translate(pattern)?;
        let find = Regex::new(&translated).map_err(|e| e.to_string())?;
        let whole = Regex::new(&format!("\\A(?:{translated})\\z")).map_err(|e| e.to_string())?;
        let group_count = find.captures_len().saturating_sub(1);
        let group_names = find
            .capture_names()
            .enumerate()
            .filter_map(|(i, n)| n.map(|n| (n.to_owned(), i)))
            .collect();
        Ok(JavaRegex {
            source: pattern.to_owned(),
            find,
            whole,
            group_count,
            group_names,
        })
    }

    /// The pattern as the user wrote it.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Number of capturing groups (group 0 excluded), as `Matcher.groupCount()`.
    pub fn group_count(&self) -> usize {
        self.group_count
    }

    /// `Matcher.matches()`: the whole input matches.
    pub fn matches(&self, input: &str) -> Result<bool, String> {
        self.whole.is_match(input).map_err(|e| e.to_string())
    }

    /// Parses a Java replacement string against this pattern's groups.
    pub fn replacement(&self, replacement: &str) -> JavaReplacement {
        JavaReplacement {
            parsed: parse_replacement(replacement, self.group_count, &self.group_names),
        }
    }

    /// `Matcher.replaceFirst(replacement)`: replaces the leftmost match (found by `find()`,
    /// not necessarily the whole input) and keeps the rest.
    pub fn replace_first(
        &self,
        input: &str,
        replacement: &JavaReplacement,
    ) -> Result<String, String> {
        let Some(caps) = self.find.captures(input).map_err(|e| e.to_string())? else {
            return Ok(input.to_owned());
        };
        let tokens = replacement.parsed.as_ref().map_err(Clone::clone)?;
        let whole = caps.get(0).expect("group 0 is always present in a match");
        let mut out = String::with_capacity(input.len() + 16);
        out.push_str(&input[..whole.start()]);
        for t in tokens {
            match t {
                Token::Literal(s) => out.push_str(s),
                Token::Group(g) => {
                    if let Some(m) = caps.get(*g) {
                        out.push_str(m.as_str());
                    }
                }
            }
        }
        out.push_str(&input[whole.end()..]);
        Ok(out)
    }

    /// `matches()` then `replaceFirst()` (RegexRouter's rule): `None` when the input doesn't match.
    pub fn route(
        &self,
        input: &str,
        replacement: &JavaReplacement,
    ) -> Result<Option<String>, String> {
        if !self.matches(input)? {
            return Ok(None);
        }
        self.replace_first(input, replacement).map(Some)
    }
}

/// A parsed Java replacement string; a malformed one keeps Java's error, raised when used
/// (Java raises it in `replaceFirst`, i.e. per record, not at configuration).
#[derive(Debug, Clone)]
pub struct JavaReplacement {
    parsed: Result<Vec<Token>, String>,
}

impl JavaReplacement {
    /// The parse error Java would raise when this replacement is applied, if any.
    pub fn error(&self) -> Option<&str> {
        self.parsed.as_ref().err().map(String::as_str)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Literal(String),
    Group(usize),
}

/// Java's `Matcher.appendExpandedReplacement` grammar.
fn parse_replacement(
    replacement: &str,
    group_count: usize,
    names: &[(String, usize)],
) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = replacement.chars().collect();
    let mut tokens = Vec::new();
    let mut lit = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            i += 1;
            let Some(&next) = chars.get(i) else {
                return Err("character to be escaped is missing".to_owned());
            };
            lit.push(next);
            i += 1;
        } else if c == '$' {
            i += 1;
            let Some(&next) = chars.get(i) else {
                return Err("Illegal group reference: group index is missing".to_owned());
            };
            let group = if next == '{' {
                i += 1;
                let start = i;
                while i < chars.len() && chars[i].is_ascii_alphanumeric() {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                if name.is_empty() {
                    return Err("named capturing group has 0 length name".to_owned());
                }
                if chars.get(i) != Some(&'}') {
                    return Err("named capturing group is missing trailing '}'".to_owned());
                }
                i += 1;
                if name.starts_with(|c: char| c.is_ascii_digit()) {
                    return Err(format!(
                        "capturing group name {{{name}}} starts with digit character"
                    ));
                }
                names
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, g)| *g)
                    .ok_or_else(|| format!("No group with name {{{name}}}"))?
            } else {
                let Some(first) = next.to_digit(10) else {
                    return Err("Illegal group reference".to_owned());
                };
                i += 1;
                let mut num = first as usize;
                if num > group_count {
                    return Err(format!("No group {num}"));
                }
                // Further digits only while the number stays a valid group.
                while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
                    let candidate = num * 10 + d as usize;
                    if candidate > group_count {
                        break;
                    }
                    num = candidate;
                    i += 1;
                }
                num
            };
            if !lit.is_empty() {
                tokens.push(Token::Literal(std::mem::take(&mut lit)));
            }
            tokens.push(Token::Group(group));
        } else {
            lit.push(c);
            i += 1;
        }
    }
    if !lit.is_empty() {
        tokens.push(Token::Literal(lit));
    }
    Ok(tokens)
}

const H_CLASS: &str = r"\t \xA0\x{1680}\x{180e}\x{2000}-\x{200a}\x{202f}\x{205f}\x{3000}";
const V_CLASS: &str = r"\n\x0B\x0C\r\x{85}\x{2028}\x{2029}";

fn posix_class(name: &str) -> Option<&'static str> {
    Some(match name {
        "Lower" => "a-z",
        "Upper" => "A-Z",
        "ASCII" => r"\x00-\x7F",
        "Alpha" => "a-zA-Z",
        "Digit" => "0-9",
        "Alnum" => "a-zA-Z0-9",
        "Punct" => r"!-/:-@\[-`{-~",
        "Graph" => r"!-~",
        "Print" => r" -~",
        "Blank" => r" \t",
        "Cntrl" => r"\x00-\x1F\x7F",
        "XDigit" => "0-9a-fA-F",
        "Space" => r" \t\n\x0B\f\r",
        _ => return None,
    })
}

fn escape_literal(c: char, out: &mut String) {
    if c.is_ascii_alphanumeric() || c == '_' || c as u32 > 127 {
        out.push(c);
    } else {
        out.push('\\');
        out.push(c);
    }
}

/// Rewrites Java-only syntax into fancy-regex syntax; group numbering is unchanged.
fn translate(pattern: &str) -> Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    // Output positions where the most recent atom starts and where open groups start.
    let mut atom_start: Option<usize> = None;
    let mut group_starts: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                let Some(&n) = chars.get(i + 1) else {
                    return Err(format!("Unexpected internal error near index {}", i + 1));
                };
                let start = out.len();
                match n {
                    'Q' => {
                        // Quote until \E (or the end).
                        let mut j = i + 2;
                        let mut quoted = String::new();
                        while j < chars.len()
                            && !(chars[j] == '\\' && chars.get(j + 1) == Some(&'E'))
                        {
                            escape_literal(chars[j], &mut quoted);
                            j += 1;
                        }
                        i = if j < chars.len() { j + 2 } else { j };
                        out.push_str("(?:");
                        out.push_str(&quoted);
                        out.push(')');
                        atom_start = Some(start);
                        continue;
                    }
                    'h' => out.push_str(&format!("[{H_CLASS}]")),
                    'H' => out.push_str(&format!("[^{H_CLASS}]")),
                    'v' => out.push_str(&format!("[{V_CLASS}]")),
                    'V' => out.push_str(&format!("[^{V_CLASS}]")),
                    'p' | 'P' if chars.get(i + 2) == Some(&'{') => {
                        let close = chars[i + 3..]
                            .iter()
                            .position(|&c| c == '}')
                            .ok_or_else(|| "Unclosed character family".to_owned())?;
                        let name: String = chars[i + 3..i + 3 + close].iter().collect();
                        i += 4 + close;
                        if let Some(class) = posix_class(&name) {
                            out.push_str(if n == 'p' { "[" } else { "[^" });
                            out.push_str(class);
                            out.push(']');
                        } else if name.starts_with("java") {
                            return Err(format!(
                                "Java character class \\{n}{{{name}}} is not supported by Headwater"
                            ));
                        } else {
                            out.push('\\');
                            out.push(n);
                            out.push('{');
                            out.push_str(name.strip_prefix("Is").unwrap_or(&name));
                            out.push('}');
                        }
                        atom_start = Some(start);
                        continue;
                    }
                    _ => {
                        out.push('\\');
                        out.push(n);
                    }
                }
                i += 2;
                atom_start = Some(start);
            }
            '[' => {
                let start = out.len();
                i = translate_class(&chars, i, &mut out)?;
                atom_start = Some(start);
            }
            '(' => {
                group_starts.push(out.len());
                out.push('(');
                i += 1;
                atom_start = None;
            }
            ')' => {
                out.push(')');
                i += 1;
                atom_start = group_starts.pop();
            }
            '*' | '+' | '?' | '{' => {
                // A quantifier (a '{' not starting a valid {n,m} is a literal in the output).
                let q_end = if c == '{' {
                    match quantifier_braces_end(&chars, i) {
                        Some(e) => e,
                        None => {
                            let start = out.len();
                            out.push_str("\\{");
                            i += 1;
                            atom_start = Some(start);
                            continue;
                        }
                    }
                } else {
                    i + 1
                };
                let quant: String = chars[i..q_end].iter().collect();
                i = q_end;
                match chars.get(i) {
                    Some('+') => {
                        // Possessive: (?>atom quant)
                        let Some(start) = atom_start else {
                            return Err(format!("Dangling meta character '{c}'"));
                        };
                        let atom = out.split_off(start);
                        out.push_str("(?>");
                        out.push_str(&atom);
                        out.push_str(&quant);
                        out.push(')');
                        i += 1;
                    }
                    Some('?') => {
                        out.push_str(&quant);
                        out.push('?');
                        i += 1;
                    }
                    _ => out.push_str(&quant),
                }
                atom_start = None;
            }
            _ => {
                let start = out.len();
                out.push(c);
                i += 1;
                atom_start = if c == '|' || c == '^' || c == '$' {
                    None
                } else {
                    Some(start)
                };
            }
        }
    }
    Ok(out)
}

/// End (exclusive) of a `{n}`, `{n,}` or `{n,m}` quantifier starting at `i`, if it is one.
fn quantifier_braces_end(chars: &[char], i: usize) -> Option<usize> {
    let mut j = i + 1;
    let digits_start = j;
    while j < chars.len() && chars[j].is_ascii_digit() {
        j += 1;
    }
    if j == digits_start {
        return None;
    }
    if chars.get(j) == Some(&',') {
        j += 1;
        while j < chars.len() && chars[j].is_ascii_digit() {
            j += 1;
        }
    }
    (chars.get(j) == Some(&'}')).then_some(j + 1)
}

/// Copies a character class starting at `chars[i] == '['`, translating Java-only escapes;
/// returns the index after its closing `]`.
fn translate_class(chars: &[char], mut i: usize, out: &mut String) -> Result<usize, String> {
    out.push('[');
    i += 1;
    if chars.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    // A ']' right after '[' or '[^' is a literal in Java.
    if chars.get(i) == Some(&']') {
        out.push_str("\\]");
        i += 1;
    }
    while i < chars.len() {
        match chars[i] {
            ']' => {
                out.push(']');
                return Ok(i + 1);
            }
            '[' => {
                i = translate_class(chars, i, out)?;
            }
            '\\' => {
                let Some(&n) = chars.get(i + 1) else {
                    return Err("Unclosed character class".to_owned());
                };
                match n {
                    'h' => out.push_str(H_CLASS),
                    'v' => out.push_str(V_CLASS),
                    'H' | 'V' => {
                        return Err(format!(
                            "\\{n} inside a character class is not supported by Headwater"
                        ))
                    }
                    'Q' => {
                        let mut j = i + 2;
                        while j < chars.len()
                            && !(chars[j] == '\\' && chars.get(j + 1) == Some(&'E'))
                        {
                            escape_literal(chars[j], out);
                            j += 1;
                        }
                        i = if j < chars.len() { j + 2 } else { j };
                        continue;
                    }
                    _ => {
                        out.push('\\');
                        out.push(n);
                    }
                }
                i += 2;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Err("Unclosed character class".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RegexRouter's behaviour: matches() gate, then replaceFirst.
    fn route(regex: &str, replacement: &str, topic: &str) -> Result<Option<String>, String> {
        let re = JavaRegex::compile(regex)?;
        let rep = re.replacement(replacement);
        re.route(topic, &rep)
    }

    #[test]
    fn seed_config_routes_cdc_topics() {
        let r = |t| route(r"cdc\.public\.(.*)", "warehouse.$1", t).unwrap();
        assert_eq!(r("cdc.public.orders").as_deref(), Some("warehouse.orders"));
        assert_eq!(
            r("cdc.public.order_items").as_deref(),
            Some("warehouse.order_items")
        );
        assert_eq!(r("cdc.transaction"), None);
        assert_eq!(r("__debezium-heartbeat.cdc"), None);
        // Full match required: a prefix match is not enough.
        assert_eq!(
            route(r"cdc\.public", "x", "cdc.public.orders").unwrap(),
            None
        );
    }

    #[test]
    fn java_replacement_grammar() {
        // $1 followed by letters is group 1 then the letters (Rust would read a group "1abc").
        assert_eq!(
            route("(a)(b)", "$1abc", "ab").unwrap().as_deref(),
            Some("aabc")
        );
        // $10 with fewer than 10 groups: group 1 then "0".
        assert_eq!(route("(x)y", "$10", "xy").unwrap().as_deref(), Some("x0"));
        // $10 with 10 groups is group 10.
        let ten = "(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)";
        assert_eq!(
            route(ten, "$10$1", "abcdefghij").unwrap().as_deref(),
            Some("ja")
        );
        // $11 with 10 groups: group 1 then "1".
        assert_eq!(
            route(ten, "$11", "abcdefghij").unwrap().as_deref(),
            Some("a1")
        );
        // Named groups.
        assert_eq!(
            route(
                r"(?<db>\w+)\.(?<table>\w+)",
                "${table}_${db}",
                "shop.orders"
            )
            .unwrap()
            .as_deref(),
            Some("orders_shop")
        );
        // Escapes: \$ is a dollar, \\ a backslash, \x any char literally.
        assert_eq!(
            route("(a)", r"\$1\\x\y", "a").unwrap().as_deref(),
            Some(r"$1\xy")
        );
        // Non-participating group: empty.
        assert_eq!(
            route("(a)|(b)", "[$1|$2]", "b").unwrap().as_deref(),
            Some("[|b]")
        );
        // $0 is the whole match.
        assert_eq!(
            route("t.*", "x-$0", "topic").unwrap().as_deref(),
            Some("x-topic")
        );
    }

    #[test]
    fn java_replacement_errors() {
        let err = |rep: &str| route("(a)", rep, "a").unwrap_err();
        assert_eq!(err("$2"), "No group 2");
        assert_eq!(err("$x"), "Illegal group reference");
        assert_eq!(err("x$"), "Illegal group reference: group index is missing");
        assert_eq!(err("x\\"), "character to be escaped is missing");
        assert_eq!(err("${nope}"), "No group with name {nope}");
        assert_eq!(err("${a"), "named capturing group is missing trailing '}'");
        assert_eq!(err("${}"), "named capturing group has 0 length name");
        // Not matching: no error, the replacement is never evaluated (as in Java).
        assert_eq!(route("(a)", "$9", "b").unwrap(), None);
    }

    #[test]
    fn replace_first_replaces_only_the_leftmost_find() {
        // `a|ab` matches "ab" as a whole (matches() backtracks into the second branch), but
        // find() stops at "a", so only "a" is replaced and "b" stays.
        assert_eq!(route("a|ab", "X", "ab").unwrap().as_deref(), Some("Xb"));
        // Lazy quantifier: find() takes the shortest prefix.
        assert_eq!(
            route("(.*?)", "[$1]", "abc").unwrap().as_deref(),
            Some("[]abc")
        );
        assert_eq!(
            route("(.+?)", "[$1]", "abc").unwrap().as_deref(),
            Some("[a]bc")
        );
        // Greedy: whole string.
        assert_eq!(
            route("(.+)", "[$1]", "abc").unwrap().as_deref(),
            Some("[abc]")
        );
    }

    #[test]
    fn java_regex_features_users_write() {
        // Look-ahead / look-behind.
        assert_eq!(
            route(r"(?!internal)(\w+)\.(\w+)", "$2", "shop.orders")
                .unwrap()
                .as_deref(),
            Some("orders")
        );
        assert_eq!(
            route(r"(?!internal)(\w+)\.(\w+)", "$2", "internal.x").unwrap(),
            None
        );
        assert_eq!(
            route(r".*(?<=\.)(\w+)", "t_$1", "a.b.c")
                .unwrap()
                .as_deref(),
            Some("t_c")
        );
        // Possessive quantifier: `a*+a` can never match (no backtracking into a*+).
        assert_eq!(route("a*+a", "x", "aaa").unwrap(), None);
        assert_eq!(
            route("(a++)(b)", "$2$1", "aab").unwrap().as_deref(),
            Some("baa")
        );
        assert_eq!(
            route(r"(\d{2}+)x", "$1", "12x").unwrap().as_deref(),
            Some("12")
        );
        // Atomic group and back-reference.
        assert_eq!(route(r"(?>ab|a)b", "x", "ab").unwrap(), None);
        assert_eq!(
            route(r"(\w)\1(.*)", "$2", "xxtail").unwrap().as_deref(),
            Some("tail")
        );
        // \Q...\E quoting and POSIX classes.
        assert_eq!(
            route(r"\Qcdc.public.\E(.*)", "$1", "cdc.public.t")
                .unwrap()
                .as_deref(),
            Some("t")
        );
        assert_eq!(
            route(r"\Qcdc.public.\E(.*)", "$1", "cdcXpublicXt").unwrap(),
            None
        );
        assert_eq!(
            route(r"\p{Lower}+_(\p{Digit}+)", "$1", "abc_42")
                .unwrap()
                .as_deref(),
            Some("42")
        );
        assert_eq!(route(r"\p{Lower}+", "x", "ABC").unwrap(), None);
        // Java \h is horizontal whitespace (fancy-regex's \h would be a hex digit).
        assert_eq!(route(r"a\hb", "x", "a b").unwrap().as_deref(), Some("x"));
        assert_eq!(route(r"a\hb", "x", "a1b").unwrap(), None);
        // Case-insensitive flag, alternation, character class intersection.
        assert_eq!(
            route(r"(?i)CDC\.(.*)", "$1", "cdc.t").unwrap().as_deref(),
            Some("t")
        );
        assert_eq!(
            route(r"[a-z&&[^aeiou]]+", "x", "bcd").unwrap().as_deref(),
            Some("x")
        );
        assert_eq!(route(r"[a-z&&[^aeiou]]+", "x", "bad").unwrap(), None);
        // A literal '{' that is not a quantifier.
        assert_eq!(route(r"a{b", "x", "a{b").unwrap().as_deref(), Some("x"));
    }

    #[test]
    fn invalid_patterns_and_gaps_are_errors() {
        assert!(JavaRegex::compile("(unclosed").is_err());
        assert!(JavaRegex::compile("[abc").is_err());
        let gap = JavaRegex::compile(r"\p{javaLowerCase}").unwrap_err();
        assert!(gap.contains("not supported by Headwater"), "{gap}");
        let re = JavaRegex::compile(r"(?<name>x)(y)").unwrap();
        assert_eq!(re.group_count(), 2);
        assert_eq!(re.replacement("$3").error(), Some("No group 3"));
        assert_eq!(re.replacement("${name}$2").error(), None);
    }
}
