//! The configuration reference (`docs/reference.md`), generated from the definitions the code
//! validates with: the worker's flags (clap), the connector framework's keys, every connector
//! class's `ConfigDef`, and every transform's and predicate's `ConfigDef`.
//!
//! Invariant: `docs/reference.md` is exactly [`render`]'s output; the test below fails when it
//! is stale and rewrites it with `HEADWATER_BLESS=1`.

use clap::CommandFactory;
use headwater_api::config::{ConfigDef, ConfigDefault};
use headwater_api::SourceRecord;

use crate::cli::Cli;

/// Markdown table cell text: one line, pipes escaped.
fn cell(text: &str) -> String {
    let one_line: Vec<&str> = text.split_whitespace().collect();
    one_line.join(" ").replace('|', "\\|")
}

fn code(text: &str) -> String {
    if text.is_empty() {
        "`\"\"`".to_owned()
    } else {
        format!("`{}`", text.replace('|', "\\|"))
    }
}

/// The built-in default of a worker setting (the settings module's constants).
fn worker_default(long: &str) -> String {
    match long {
        "data-dir" => code(crate::settings::DEFAULT_DATA_DIR),
        "rest-listen" => code(crate::settings::DEFAULT_REST_LISTEN),
        "kafka-listen" => code(crate::settings::DEFAULT_KAFKA_LISTEN),
        "log-level" => code(crate::settings::DEFAULT_LOG_LEVEL),
        "log-format" => code("human"),
        _ => "–".to_owned(),
    }
}

fn worker_section(out: &mut String) {
    out.push_str("## Worker (`headwater worker`)\n\n");
    out.push_str(
        "Each setting comes from its flag, else its environment variable, else the config file \
         (`--config`, TOML, key as shown), else the default. `config/worker.toml` lists them with \
         comments. Connector config files (JSON or `.properties`) given as arguments \
         (`headwater worker pg.json mysql.properties`) are created or updated at start.\n\n",
    );
    out.push_str(
        "| TOML key | Flag | Environment | Default | Description |\n|---|---|---|---|---|\n",
    );
    let cmd = Cli::command();
    let worker = cmd
        .get_subcommands()
        .find(|c| c.get_name() == "worker")
        .expect("the worker subcommand");
    for arg in worker.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if matches!(long, "help" | "version") {
            continue;
        }
        let toml = match long {
            "config" => "–".to_owned(),
            // Repeatable flag, list in the file.
            "rest-auth-user" => code("rest_auth_users"),
            "kafka-sasl-user" => code("kafka_sasl_users"),
            _ => code(&long.replace('-', "_")),
        };
        let env = arg
            .get_env()
            .map(|e| code(&e.to_string_lossy()))
            .unwrap_or_else(|| "–".to_owned());
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        out.push_str(&format!(
            "| {toml} | `--{long}` | {env} | {} | {} |\n",
            worker_default(long),
            cell(&help)
        ));
    }
    out.push('\n');
}

fn config_def_table(out: &mut String, def: &ConfigDef) {
    if def.keys().is_empty() {
        out.push_str("No settings.\n\n");
        return;
    }
    out.push_str("| Key | Type | Default | Importance | Description |\n|---|---|---|---|---|\n");
    for key in def.keys() {
        let default = match &key.default {
            ConfigDefault::Required => "required".to_owned(),
            ConfigDefault::Null => "–".to_owned(),
            ConfigDefault::Value(v) => code(&v.to_config_string()),
        };
        out.push_str(&format!(
            "| `{}` | {} | {default} | {} | {} |\n",
            key.name,
            key.config_type.name().to_ascii_lowercase(),
            key.importance.name().to_ascii_lowercase(),
            cell(&key.documentation)
        ));
    }
    out.push('\n');
}

fn aliases(list: &[&str]) -> String {
    if list.is_empty() {
        String::new()
    } else {
        let shown: Vec<String> = list.iter().map(|a| format!("`{a}`")).collect();
        format!(" (aliases {})", shown.join(", "))
    }
}

/// The whole reference, as Markdown.
pub fn render() -> String {
    let mut out = String::from(
        "# Configuration reference\n\n\
         Generated from the code by `runtime/worker/src/reference.rs`; do not edit by hand \
         (`HEADWATER_BLESS=1 cargo test -p headwater --bin headwater reference` rewrites it, and \
         the test suite fails when it is stale). The user guide explains the settings in \
         context: [connectors](README.md), [transforms](transforms.md), \
         [the worker](configuration.md).\n\n",
    );
    worker_section(&mut out);

    out.push_str("## Every connector: framework keys\n\n");
    config_def_table(&mut out, &headwater_engine::engine::framework_config_def());

    let plugins = crate::plugins::registry();
    for info in plugins.plugin_infos(true) {
        let plugin = plugins.find_any(&info.class).expect("a registered class");
        let (kind, alias_list): (&str, Vec<&str>) = match &plugin {
            headwater_engine::plugins::AnyConnector::Source(p) => {
                ("Source", p.aliases.iter().map(String::as_str).collect())
            }
            headwater_engine::plugins::AnyConnector::Sink(p) => {
                ("Sink", p.aliases.iter().map(String::as_str).collect())
            }
        };
        out.push_str(&format!(
            "## {kind} `{}`{}\n\n",
            plugin.class(),
            aliases(&alias_list)
        ));
        config_def_table(&mut out, &plugin.config_def());
    }

    for t in headwater_transforms::registry::transforms::<SourceRecord>() {
        out.push_str(&format!(
            "## Transform `{}`{}\n\n",
            t.class,
            aliases(t.aliases)
        ));
        config_def_table(&mut out, &(t.config_def)());
    }
    for p in headwater_transforms::registry::predicates::<SourceRecord>() {
        out.push_str(&format!(
            "## Predicate `{}`{}\n\n",
            p.class,
            aliases(p.aliases)
        ));
        config_def_table(&mut out, &(p.config_def)());
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/reference.md");
        let want = render();
        if std::env::var_os("HEADWATER_BLESS").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            have == want,
            "docs/reference.md is stale: run `HEADWATER_BLESS=1 cargo test -p headwater --bin headwater reference` and commit it"
        );
        for needle in [
            "`--data-dir`",
            "io.debezium.connector.postgresql.PostgresConnector",
            "io.debezium.connector.mongodb.MongoDbConnector",
            "org.apache.kafka.connect.transforms.RegexRouter",
            "`slot.name`",
            "`errors.tolerance`",
        ] {
            assert!(want.contains(needle), "reference lacks {needle}");
        }
    }

    #[test]
    fn cells_stay_on_one_line() {
        assert_eq!(cell("a |\n b"), "a \\| b");
        assert_eq!(code(""), "`\"\"`");
    }
}
