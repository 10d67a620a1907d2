//! Connector configuration files given on the command line (`headwater worker a.json b.properties`),
//! created (or updated) at start like `connect-standalone` does.
//!
//! Accepted forms: the JSON body of `POST /connectors` (`{"name": .., "config": {..}}`), a flat
//! JSON object of string values that includes `name`, or a Java `.properties` file
//! (`key=value` lines, `#`/`!` comments). Every value ends up a string, as Kafka Connect stores it.

use std::path::Path;

use headwater_api::Properties;
use serde_json::Value;

use crate::failure::Failure;

/// A connector read from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorFile {
    pub name: String,
    pub config: Properties,
}

/// Reads and checks one file; errors are one line naming the file.
pub fn read(path: &Path) -> Result<ConnectorFile, Failure> {
    let config = read_config(path)?;
    let shown = path.display();
    let name = config
        .get("name")
        .cloned()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            Failure::usage(format!(
                "connector file {shown} has no connector name (\"name\")"
            ))
        })?;
    Ok(ConnectorFile { name, config })
}

/// Reads a file in any accepted form into a flat config (with `name` when the file has one).
pub fn read_config(path: &Path) -> Result<Properties, Failure> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("cannot read connector file {shown}: {e}")))?;
    let config = if text.trim_start().starts_with('{') {
        let json: Value = serde_json::from_str(&text).map_err(|e| {
            Failure::usage(format!("connector file {shown} is not valid JSON: {e}"))
        })?;
        let obj = json.as_object().ok_or_else(|| {
            Failure::usage(format!("connector file {shown} must hold a JSON object"))
        })?;
        let (config_obj, outer_name) = match obj.get("config").and_then(Value::as_object) {
            Some(c) => (c, obj.get("name").and_then(Value::as_str)),
            None => (obj, None),
        };
        let mut config = Properties::new();
        for (k, v) in config_obj {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => {
                    return Err(Failure::usage(format!(
                        "connector file {shown}: the value of {k} must be a string, not {other}"
                    )))
                }
            };
            config.insert(k.clone(), text);
        }
        if let Some(name) = outer_name {
            config.insert("name".into(), name.to_owned());
        }
        config
    } else {
        parse_properties(&text)
    };
    Ok(config)
}

/// Java `.properties` lines: `key=value` or `key: value`, comments with `#` or `!`.
fn parse_properties(text: &str) -> Properties {
    let mut out = Properties::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let split = line.find(['=', ':']).unwrap_or(line.len());
        let key = line[..split].trim();
        let value = line.get(split + 1..).unwrap_or("").trim();
        out.insert(key.to_owned(), value.to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_json_and_properties_forms() {
        let dir = tempfile::tempdir().unwrap();
        let wrapped = dir.path().join("a.json");
        std::fs::write(
            &wrapped,
            r#"{"name":"pg","config":{"connector.class":"x","tasks.max":1}}"#,
        )
        .unwrap();
        let c = read(&wrapped).unwrap();
        assert_eq!(c.name, "pg");
        assert_eq!(c.config.get("tasks.max").map(String::as_str), Some("1"));
        let flat = dir.path().join("b.json");
        std::fs::write(&flat, r#"{"name":"flat","connector.class":"x"}"#).unwrap();
        assert_eq!(read(&flat).unwrap().name, "flat");
        let props = dir.path().join("c.properties");
        std::fs::write(
            &props,
            "# comment\nname=gen\nconnector.class = datagen\nkafka.topic: t\n",
        )
        .unwrap();
        let c = read(&props).unwrap();
        assert_eq!(
            (c.name.as_str(), c.config["kafka.topic"].as_str()),
            ("gen", "t")
        );
        let nameless = dir.path().join("d.json");
        std::fs::write(&nameless, r#"{"connector.class":"x"}"#).unwrap();
        assert!(read(&nameless)
            .unwrap_err()
            .to_string()
            .contains("no connector name"));
        assert!(read(&dir.path().join("missing.json")).is_err());
    }
}
