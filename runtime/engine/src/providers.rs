//! Config providers (Kafka's `ConfigTransformer`): `${env:NAME}`, `${file:/path:key}` and
//! `${dir:/path:file}` placeholders in connector configs, and redaction of secrets for logs.
//!
//! Invariants:
//! - stored configs keep their placeholders: resolution happens only when a connector or task
//!   is validated or started ([`resolve`]), and resolved values are never written back;
//! - the placeholder grammar is Kafka's (`${provider:[path:]key}`, the path ending at its first
//!   `:`); a placeholder naming a provider this build does not know is left as it is (Kafka
//!   does the same), but one naming a known provider that cannot be resolved (unset variable,
//!   unreadable file, missing key) is an error on that config key (Kafka would leave it
//!   unresolved and let the connector fail later);
//! - [`Resolved::masks`] remembers which resolved values came from placeholders, so messages
//!   and validation results shown to users can put the placeholder back instead of the secret;
//! - [`redacted`] hides the values of PASSWORD-type keys and of every key whose name contains
//!   `password`: configs reach the logs only through it.

use std::collections::BTreeMap;
use std::path::Path;

use headwater_api::config::{ConfigDef, ConfigType};
use headwater_api::Properties;

/// What replaces a hidden value.
pub const HIDDEN: &str = "[hidden]";

/// A config with its placeholders resolved.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    /// The resolved config.
    pub props: Properties,
    /// `(resolved value, raw value)` of every key that held a placeholder.
    pub masks: Vec<(String, String)>,
    /// `(key, message)` for every key whose placeholder could not be resolved; such keys keep
    /// their raw value in `props`.
    pub errors: Vec<(String, String)>,
}

impl Resolved {
    /// Puts the raw (placeholder) text back wherever a resolved value of at least
    /// [`MIN_MASKED_LEN`] characters appears in `text` (shorter ones would garble unrelated
    /// text and are not worth hiding).
    pub fn mask(&self, text: &str) -> String {
        let mut out = text.to_owned();
        // Longest first, so a value that contains another is replaced whole.
        let mut masks: Vec<&(String, String)> = self
            .masks
            .iter()
            .filter(|(v, _)| v.chars().count() >= MIN_MASKED_LEN)
            .collect();
        masks.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        for (value, raw) in masks {
            out = out.replace(value.as_str(), raw);
        }
        out
    }
}

/// Resolved values shorter than this are not masked inside longer texts.
pub const MIN_MASKED_LEN: usize = 4;

/// A task config computed from a resolved connector config, with the placeholders put back
/// ("reverse-transformed", as Kafka Connect stores task configs): a value equal to the
/// resolved value of the same key, or to any whole resolved value, shows its raw text.
pub fn unresolve(task: &Properties, raw: &Properties, resolved: &Resolved) -> Properties {
    task.iter()
        .map(|(k, v)| {
            let same_key = match (raw.get(k), resolved.props.get(k)) {
                (Some(r), Some(res)) if r != res && res == v => Some(r.clone()),
                _ => None,
            };
            let shown = same_key
                .or_else(|| {
                    resolved
                        .masks
                        .iter()
                        .find(|(value, _)| value == v)
                        .map(|(_, raw)| raw.clone())
                })
                .unwrap_or_else(|| v.clone());
            (k.clone(), shown)
        })
        .collect()
}

/// Resolves every placeholder of `props` with the built-in providers.
pub fn resolve(props: &Properties) -> Resolved {
    resolve_with(props, &|name| std::env::var(name).ok())
}

/// [`resolve`] with an explicit environment lookup (for tests).
pub fn resolve_with(props: &Properties, env: &dyn Fn(&str) -> Option<String>) -> Resolved {
    let mut out = Resolved::default();
    for (key, raw) in props {
        if !raw.contains("${") {
            out.props.insert(key.clone(), raw.clone());
            continue;
        }
        match resolve_value(raw, env) {
            Ok(value) => {
                if value != *raw {
                    out.masks.push((value.clone(), raw.clone()));
                }
                out.props.insert(key.clone(), value);
            }
            Err(message) => {
                out.errors.push((key.clone(), message));
                out.props.insert(key.clone(), raw.clone());
            }
        }
    }
    out
}

/// One placeholder: `${provider:[path:]key}`.
struct Placeholder<'a> {
    provider: &'a str,
    path: Option<&'a str>,
    key: &'a str,
}

/// Splits the text inside `${...}` the way Kafka's pattern
/// `\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}` does; `None` when it is not a placeholder.
fn parse_placeholder(inner: &str) -> Option<Placeholder<'_>> {
    let (provider, rest) = inner.split_once(':')?;
    Some(match rest.split_once(':') {
        Some((path, key)) => Placeholder {
            provider,
            path: Some(path),
            key,
        },
        None => Placeholder {
            provider,
            path: None,
            key: rest,
        },
    })
}

fn resolve_value(raw: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let inner = &after[..end];
        let whole = &rest[start..start + 2 + end + 1];
        match parse_placeholder(inner) {
            Some(p) => match lookup(&p, env)? {
                Some(value) => out.push_str(&value),
                None => out.push_str(whole),
            },
            None => out.push_str(whole),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `Ok(None)` for a provider this build does not have (the placeholder stays).
fn lookup(
    p: &Placeholder<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, String> {
    let shown = match p.path {
        Some(path) => format!("${{{}:{}:{}}}", p.provider, path, p.key),
        None => format!("${{{}:{}}}", p.provider, p.key),
    };
    match p.provider {
        "env" => {
            if p.path.is_some_and(|path| !path.is_empty()) {
                return Err(format!(
                    "cannot resolve {shown}: the env provider takes no path (use ${{env:NAME}})"
                ));
            }
            env(p.key).map(Some).ok_or_else(|| {
                format!(
                    "cannot resolve {shown}: environment variable {} is not set in the worker",
                    p.key
                )
            })
        }
        "file" => {
            let path = p.path.filter(|path| !path.is_empty()).ok_or_else(|| {
                format!("cannot resolve {shown}: the file provider needs a path (use ${{file:/path/to/file.properties:key}})")
            })?;
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot resolve {shown}: cannot read {path}: {e}"))?;
            parse_properties(&text)
                .remove(p.key)
                .map(Some)
                .ok_or_else(|| format!("cannot resolve {shown}: {path} has no key {}", p.key))
        }
        "dir" => {
            let dir = p.path.filter(|path| !path.is_empty()).ok_or_else(|| {
                format!("cannot resolve {shown}: the dir provider needs a directory (use ${{dir:/path/to/dir:file}})")
            })?;
            let file = Path::new(dir).join(p.key);
            if p.key.is_empty() || p.key.contains('/') {
                return Err(format!(
                    "cannot resolve {shown}: the key must be a file name in {dir}"
                ));
            }
            std::fs::read_to_string(&file).map(Some).map_err(|e| {
                format!(
                    "cannot resolve {shown}: cannot read {}: {e}",
                    file.display()
                )
            })
        }
        _ => Ok(None),
    }
}

/// Java `.properties` text as Kafka's `FileConfigProvider` reads it: `key=value`, `key: value`
/// or `key value`; `#`/`!` comments; a trailing backslash continues a line; `\t`, `\n`,
/// `\r`, `\f`, `\uXXXX` and `\<char>` escapes.
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut logical = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if logical.is_empty() && (trimmed.is_empty() || trimmed.starts_with(['#', '!'])) {
            continue;
        }
        logical.push_str(trimmed);
        let trailing = logical.chars().rev().take_while(|c| *c == '\\').count();
        if trailing % 2 == 1 {
            logical.pop();
            if lines.clone().next().is_some() {
                continue;
            }
        }
        let (key, value) = split_key_value(&logical);
        out.insert(unescape(&key), unescape(value.trim_start()));
        logical.clear();
    }
    out
}

fn split_key_value(line: &str) -> (String, &str) {
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '=' | ':' => return (line[..i].trim_end().to_owned(), &line[i + 1..]),
            c if c.is_whitespace() => {
                let rest = line[i..].trim_start();
                let rest = rest
                    .strip_prefix(['=', ':'])
                    .map(str::trim_start)
                    .unwrap_or(rest);
                return (line[..i].to_owned(), rest);
            }
            _ => {}
        }
    }
    (line.to_owned(), "")
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) => out.push(ch),
                    None => {
                        out.push_str("\\u");
                        out.push_str(&hex);
                    }
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// Whether a key's value must never be shown: PASSWORD type in `def`, or `password` in its
/// name (case-insensitive).
pub fn is_secret_key(key: &str, def: Option<&ConfigDef>) -> bool {
    key.to_ascii_lowercase().contains("password")
        || def
            .and_then(|d| d.key(key))
            .is_some_and(|k| k.config_type == ConfigType::Password)
}

/// `props` with secret values replaced by `[hidden]`, for logs.
pub fn redacted(props: &Properties, def: Option<&ConfigDef>) -> BTreeMap<String, String> {
    props
        .iter()
        .map(|(k, v)| {
            let shown = if is_secret_key(k, def) {
                HIDDEN.to_owned()
            } else {
                v.clone()
            };
            (k.clone(), shown)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use headwater_api::config::ConfigKey;

    use headwater_api::properties as props;

    fn env(name: &str) -> Option<String> {
        match name {
            "PGPASS" => Some("s3cret".into()),
            "HOST" => Some("db.local".into()),
            _ => None,
        }
    }

    #[test]
    fn env_placeholders_resolve_and_mask() {
        let r = resolve_with(
            &props(&[
                ("database.password", "${env:PGPASS}"),
                ("url", "jdbc:postgresql://${env:HOST}:5432/x"),
                ("plain", "no placeholders"),
                ("other", "${vault:secret/x:key}"),
                ("unclosed", "${env:HOST"),
            ]),
            &env,
        );
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(r.props["database.password"], "s3cret");
        assert_eq!(r.props["url"], "jdbc:postgresql://db.local:5432/x");
        assert_eq!(r.props["plain"], "no placeholders");
        assert_eq!(r.props["other"], "${vault:secret/x:key}");
        assert_eq!(r.props["unclosed"], "${env:HOST");
        assert_eq!(
            r.mask("bad password s3cret for jdbc:postgresql://db.local:5432/x"),
            "bad password ${env:PGPASS} for jdbc:postgresql://${env:HOST}:5432/x"
        );
    }

    #[test]
    fn unresolvable_placeholders_are_errors_per_key() {
        let r = resolve_with(
            &props(&[
                ("a", "${env:MISSING}"),
                ("b", "${env:x:HOST}"),
                ("c", "${file:/nonexistent/x.properties:k}"),
                ("d", "${file::k}"),
            ]),
            &env,
        );
        let keys: Vec<&str> = r.errors.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b", "c", "d"]);
        assert!(r.errors[0]
            .1
            .contains("environment variable MISSING is not set"));
        assert!(r.errors[2]
            .1
            .contains("cannot read /nonexistent/x.properties"));
        assert_eq!(r.props["a"], "${env:MISSING}");
    }

    #[test]
    fn file_and_dir_providers_read_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secrets.properties");
        std::fs::write(
            &file,
            "# comment\n! other\nuser = alice\npassword:pa\\:ss\nspaced value here\nlong=a\\\n   b\nuni=\\u00e9\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("token"), "tok-123").unwrap();
        let f = file.display();
        let d = dir.path().display();
        let r = resolve_with(
            &props(&[
                ("u", &format!("${{file:{f}:user}}")),
                ("p", &format!("${{file:{f}:password}}")),
                ("s", &format!("${{file:{f}:spaced}}")),
                ("l", &format!("${{file:{f}:long}}")),
                ("e", &format!("${{file:{f}:uni}}")),
                ("t", &format!("${{dir:{d}:token}}")),
                ("missing", &format!("${{file:{f}:nope}}")),
            ]),
            &env,
        );
        assert_eq!(r.props["u"], "alice");
        assert_eq!(r.props["p"], "pa:ss");
        assert_eq!(r.props["s"], "value here");
        assert_eq!(r.props["l"], "ab");
        assert_eq!(r.props["e"], "é");
        assert_eq!(r.props["t"], "tok-123");
        assert_eq!(r.errors.len(), 1);
        assert!(r.errors[0].1.contains("has no key nope"), "{:?}", r.errors);
    }

    #[test]
    fn task_configs_get_their_placeholders_back() {
        let raw = props(&[("database.password", "${env:PGPASS}"), ("n", "1")]);
        let resolved = resolve_with(&raw, &env);
        let task = props(&[
            ("database.password", "s3cret"),
            ("copied", "s3cret"),
            ("n", "1"),
            ("task.id", "0"),
        ]);
        let shown = unresolve(&task, &raw, &resolved);
        assert_eq!(shown["database.password"], "${env:PGPASS}");
        assert_eq!(shown["copied"], "${env:PGPASS}");
        assert_eq!(shown["n"], "1");
        assert_eq!(shown["task.id"], "0");
        let short = resolve_with(&props(&[("k", "${env:N}")]), &|_| Some("1".into()));
        assert_eq!(short.mask("value 1 for k"), "value 1 for k");
    }

    #[test]
    fn secrets_are_redacted() {
        let def = ConfigDef::new().define(ConfigKey::new("secret.key", ConfigType::Password));
        let shown = redacted(
            &props(&[
                ("secret.key", "x"),
                ("database.PASSWORD", "y"),
                ("ssl.truststore.password", "z"),
                ("database.user", "postgres"),
            ]),
            Some(&def),
        );
        assert_eq!(shown["secret.key"], HIDDEN);
        assert_eq!(shown["database.PASSWORD"], HIDDEN);
        assert_eq!(shown["ssl.truststore.password"], HIDDEN);
        assert_eq!(shown["database.user"], "postgres");
    }
}
