//! `io.debezium.transforms.TimezoneConverter`: rewrites the temporal fields of change event
//! envelopes (`before`/`after`, and listed `source` epoch fields) into `converted.timezone` (a
//! zone id such as `Europe/Berlin`, resolved with the IANA database bundled in `jiff`, or an
//! offset `+hh:mm`).
//!
//! Converted types: `io.debezium.time.ZonedTimestamp` (ISO string re-rendered in the zone's
//! offset), `ZonedTime` (with the zone's current offset, as Debezium does),
//! `io.debezium.time.Timestamp` / `MicroTimestamp` / `NanoTimestamp` and Connect `Timestamp`
//! (wall-clock values: the UTC reading is re-interpreted as local time in the zone), and the
//! `source` fields `ts_ms`/`ts_us`/`ts_ns` when listed. Dates and times without zone are left
//! alone. `include.list` / `exclude.list` rules (`source:<table>[:<field>]`,
//! `topic:<topic>[:<field>]`, `<name>:<field>`) select events and fields as in Debezium,
//! including its prefix carry-over between comma-separated items.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use headwater_api::config::{ConfigKey, ConfigType, Importance};
use headwater_api::logical::{debezium as dbz, timestamp};
use headwater_api::{
    ConfigDef, ConfigValidation, ConnectError, ConnectRecord, Properties, Struct, Transform, Value,
};
use jiff::tz::{AmbiguousOffset, Offset, TimeZone};

use super::is_envelope;
use crate::java_regex::JavaRegex;
use crate::java_time::{civil_from_days, days_from_civil};
use crate::util::{configure, get_list, get_string};

const SUPPORTED: [&str; 6] = [
    dbz::MICRO_TIMESTAMP,
    dbz::NANO_TIMESTAMP,
    dbz::TIMESTAMP,
    dbz::ZONED_TIMESTAMP,
    dbz::ZONED_TIME,
    timestamp::LOGICAL_NAME,
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    All,
    Include,
    Exclude,
}

/// `io.debezium.transforms.TimezoneConverter`.
#[derive(Debug)]
pub struct TimezoneConverter {
    zone: TimeZone,
    include: bool,
    exclude: bool,
    topics: BTreeMap<String, BTreeSet<String>>,
    tables: BTreeMap<String, BTreeSet<String>>,
    unprefixed: BTreeMap<String, BTreeSet<String>>,
}

fn parse_zone(name: &str) -> Option<TimeZone> {
    let offset_re = JavaRegex::compile(r"^[+-]\d{2}:\d{2}(:\d{2})?$").ok()?;
    if offset_re.matches(name).ok()? {
        let sign = if name.starts_with('-') { -1 } else { 1 };
        let parts: Vec<i32> = name[1..]
            .split(':')
            .filter_map(|p| p.parse().ok())
            .collect();
        let secs = parts[0] * 3600 + parts[1] * 60 + parts.get(2).copied().unwrap_or(0);
        return Some(TimeZone::fixed(Offset::from_seconds(sign * secs).ok()?));
    }
    TimeZone::get(name).ok()
}

impl TimezoneConverter {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("converted.timezone", ConfigType::String)
                    .importance(Importance::High)
                    .doc("A string that represents the timezone to which the time-based fields should be converted.The format can be geographic (e.g. America/Los_Angeles), or it can be a UTC offset in the format of +/-hh:mm, (e.g. +08:00)."),
            )
            .define(
                ConfigKey::new("include.list", ConfigType::List)
                    .default_str("")
                    .importance(Importance::High)
                    .doc("A comma-separated list of rules that specify what events should be evaluated for timezone conversion: source:<table>[:<field>], topic:<topic>[:<field>], <matchname>:<field>."),
            )
            .define(
                ConfigKey::new("exclude.list", ConfigType::List)
                    .default_str("")
                    .importance(Importance::High)
                    .doc("A comma-separated list of rules that specify what events should be excluded from timezone conversion, same formats as include.list."),
            )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, errors| {
            let tz_name = get_string(c, "converted.timezone")?;
            let include = get_list(c, "include.list");
            let exclude = get_list(c, "exclude.list");
            let list_re = JavaRegex::compile(
                r#"^\[(source|topic|[".\w\s_]+):([".\w\s_]+(?::[".\w\s_]+)?(?:,|]$))+$"#,
            )
            .ok()?;
            for (key, list, what) in [
                ("include.list", &include, "include"),
                ("exclude.list", &exclude, "exclude"),
            ] {
                if !list.is_empty()
                    && !list_re
                        .matches(&format!("[{}]", list.join(", ")))
                        .unwrap_or(false)
                {
                    errors.add_error(key, format!("Invalid {what} list format. Please specify a list of rules in the format of \"source:<tablename>:<fieldnames>\", \"topic:<topicname>:<fieldnames>\", \"<matchname>:<fieldnames>\""));
                }
            }
            let zone = parse_zone(&tz_name);
            if zone.is_none() {
                errors.add_error("converted.timezone", "Invalid timezone format. Please specify either a geographic timezone (e.g. America/Los_Angeles) or a UTC offset in the format of +/-hh:mm, (e.g. +08:00).");
            }
            if !include.is_empty() && !exclude.is_empty() {
                errors.add_error(
                    "exclude.list",
                    "Both include and exclude lists are specified. Please specify only one.",
                );
            }
            let mut t = TimezoneConverter {
                zone: zone?,
                include: !include.is_empty(),
                exclude: !exclude.is_empty(),
                topics: BTreeMap::new(),
                tables: BTreeMap::new(),
                unprefixed: BTreeMap::new(),
            };
            t.collect(if t.exclude { &exclude } else { &include });
            Some(t)
        })
    }

    fn collect(&mut self, list: &[String]) {
        let mut prefix: Option<String> = None;
        for item in list {
            let parts: Vec<&str> = item.split(':').collect();
            let (p, name, field) = match parts.as_slice() {
                [name] => (None, *name, None),
                [a, b] | [a, b, _]
                    if a.eq_ignore_ascii_case("source") || a.eq_ignore_ascii_case("topic") =>
                {
                    (Some(a.to_string()), *b, parts.get(2).copied())
                }
                [a, b] => (None, *a, Some(*b)),
                _ => continue,
            };
            if p.is_some() {
                prefix = p;
            }
            let map = match prefix.as_deref() {
                Some("topic") => &mut self.topics,
                Some("source") => &mut self.tables,
                _ => &mut self.unprefixed,
            };
            let set = map.entry(name.to_owned()).or_default();
            if let Some(f) = field {
                set.insert(f.to_owned());
            }
        }
    }

    fn matched(&self, table: Option<&str>, topic: &str) -> Option<(String, BTreeSet<String>)> {
        if let Some(f) = self.topics.get(topic) {
            return Some((topic.to_owned(), f.clone()));
        }
        if let Some(f) = table.and_then(|t| self.tables.get(t)) {
            return Some((table?.to_owned(), f.clone()));
        }
        if let Some(f) = self.unprefixed.get(topic) {
            return Some((topic.to_owned(), f.clone()));
        }
        if let Some(f) = table.and_then(|t| self.unprefixed.get(t)) {
            return Some((table?.to_owned(), f.clone()));
        }
        None
    }

    /// Offset in seconds that the zone has at a civil date-time (Java's
    /// `ZoneRules.getOffset(LocalDateTime)`: the earlier offset in gaps and overlaps).
    fn offset_at_local(&self, epoch_secs_as_local: i64) -> i64 {
        let days = epoch_secs_as_local.div_euclid(86_400);
        let secs = epoch_secs_as_local.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let dt = jiff::civil::DateTime::new(
            y as i16,
            m as i8,
            d as i8,
            (secs / 3600) as i8,
            (secs / 60 % 60) as i8,
            (secs % 60) as i8,
            0,
        );
        match dt {
            Ok(dt) => match self.zone.to_ambiguous_timestamp(dt).offset() {
                AmbiguousOffset::Unambiguous { offset } => offset.seconds().into(),
                AmbiguousOffset::Gap { before, .. } | AmbiguousOffset::Fold { before, .. } => {
                    before.seconds().into()
                }
            },
            Err(_) => 0,
        }
    }

    fn offset_at_instant(&self, epoch_secs: i64) -> i64 {
        match jiff::Timestamp::from_second(epoch_secs) {
            Ok(ts) => self.zone.to_offset(ts).seconds().into(),
            Err(_) => 0,
        }
    }

    fn convert(&self, logical: &str, value: &Value) -> Option<Value> {
        Some(match (logical, value) {
            (dbz::ZONED_TIMESTAMP, Value::String(s)) => {
                let (local_secs, nanos, offset) = parse_offset_datetime(s)?;
                let new_offset = self.offset_at_local(local_secs);
                let instant = local_secs - offset;
                Value::String(format_offset_datetime(
                    instant + new_offset,
                    nanos,
                    new_offset,
                ))
            }
            (dbz::ZONED_TIME, Value::String(s)) => {
                let (local_secs, nanos, offset) = parse_offset_time(s)?;
                let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs() as i64;
                let new_offset = self.offset_at_instant(now);
                let secs = (local_secs - offset + new_offset).rem_euclid(86_400);
                Value::String(format!(
                    "{}{}",
                    format_time(secs, nanos),
                    format_offset(new_offset)
                ))
            }
            (dbz::MICRO_TIMESTAMP, Value::Int64(v)) => {
                Value::Int64(v - self.offset_at_local(v.div_euclid(1_000_000)) * 1_000_000)
            }
            (dbz::NANO_TIMESTAMP, Value::Int64(v)) => {
                Value::Int64(v - self.offset_at_local(v.div_euclid(1_000_000_000)) * 1_000_000_000)
            }
            (dbz::TIMESTAMP | timestamp::LOGICAL_NAME, Value::Int64(v)) => {
                Value::Int64(v - self.offset_at_local(v.div_euclid(1000)) * 1000)
            }
            _ => return None,
        })
    }

    fn convert_epoch(&self, field: &str, value: &Value) -> Result<Option<Value>, ConnectError> {
        let Value::Int64(v) = value else {
            return Err(ConnectError::data(
                "Epoch field value should be a java.lang.Long",
            ));
        };
        Ok(Some(Value::Int64(match field {
            "ts_ms" => v + self.offset_at_instant(v.div_euclid(1000)) * 1000,
            "ts_us" => v + self.offset_at_instant(v.div_euclid(1_000_000)) * 1_000_000,
            "ts_ns" => v + self.offset_at_instant(v.div_euclid(1_000_000_000)) * 1_000_000_000,
            _ => return Ok(None),
        })))
    }

    fn handle_struct(
        &self,
        part: &str,
        s: &mut Struct,
        mode: Mode,
        fields: &BTreeSet<String>,
    ) -> Result<(), ConnectError> {
        let schema = s.schema().clone();
        for f in schema.fields() {
            let epoch = part == "source" && matches!(f.name(), "ts_ms" | "ts_us" | "ts_ns");
            let name = f.schema().name();
            if name.is_none() && !epoch {
                continue;
            }
            let include = match mode {
                Mode::All => true,
                Mode::Include => fields.contains(f.name()),
                Mode::Exclude => !fields.contains(f.name()),
            };
            let supported = name.is_some_and(|n| SUPPORTED.contains(&n));
            if !include || !(supported || epoch) {
                continue;
            }
            let current = &s.values()[f.index()];
            if current.is_null() {
                continue;
            }
            let new = match name {
                Some(n) => self.convert(n, current),
                None => self.convert_epoch(f.name(), current)?,
            };
            if let Some(v) = new {
                s.put_at(f.index(), v)?;
            }
        }
        Ok(())
    }

    fn handle(
        &self,
        env: &mut Struct,
        mode: Mode,
        fields: &BTreeSet<String>,
    ) -> Result<(), ConnectError> {
        let (mut before, mut after, mut source) =
            (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for f in fields {
            if let Some(x) = f.strip_prefix("source.") {
                source.insert(x.to_owned());
            } else if let Some(x) = f.strip_prefix("before.") {
                before.insert(x.to_owned());
            } else if let Some(x) = f.strip_prefix("after.") {
                after.insert(x.to_owned());
            } else {
                before.insert(f.clone());
                after.insert(f.clone());
            }
        }
        for (part, set) in [("before", &before), ("after", &after), ("source", &source)] {
            if part == "source" && source.is_empty() {
                continue;
            }
            let Some(idx) = env.schema().field(part).map(|f| f.index()) else {
                continue;
            };
            if let Value::Struct(inner) = &env.values()[idx] {
                let mut inner = inner.clone();
                self.handle_struct(part, &mut inner, mode, set)?;
                env.put_at(idx, Value::Struct(inner))?;
            }
        }
        Ok(())
    }
}

impl<R: ConnectRecord> Transform<R> for TimezoneConverter {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        if record.value().is_null() || !record.value_schema().is_some_and(|s| is_envelope(s)) {
            return Ok(Some(record));
        }
        let topic = record.topic().to_owned();
        let (schema, value) = record.take_value();
        let Value::Struct(mut env) = value else {
            record.set_value(schema, value);
            return Ok(Some(record));
        };
        let table = match env.get("source") {
            Some(Value::Struct(s)) => s.get("table").and_then(Value::as_str).map(str::to_owned),
            _ => None,
        };
        let none = BTreeSet::new();
        if !self.include && !self.exclude {
            let listed = self.topics.contains_key(&topic)
                || table.as_ref().is_some_and(|t| {
                    self.tables.contains_key(t) || self.unprefixed.contains_key(t)
                });
            if !listed {
                self.handle(&mut env, Mode::All, &none)?;
            }
        } else if self.include {
            if let Some((_, fields)) = self.matched(table.as_deref(), &topic) {
                let mode = if fields.is_empty() {
                    Mode::All
                } else {
                    Mode::Include
                };
                self.handle(&mut env, mode, &fields)?;
            }
        } else {
            match self.matched(table.as_deref(), &topic) {
                None => self.handle(&mut env, Mode::All, &none)?,
                Some((_, fields)) if !fields.is_empty() => {
                    self.handle(&mut env, Mode::Exclude, &fields)?
                }
                Some(_) => {}
            }
        }
        record.set_value(schema, Value::Struct(env));
        Ok(Some(record))
    }
}

fn parse_offset(s: &str) -> Option<i64> {
    if s == "Z" {
        return Some(0);
    }
    let sign = match s.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let parts: Vec<i64> = s[1..]
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let secs = parts.first()? * 3600
        + parts.get(1).copied().unwrap_or(0) * 60
        + parts.get(2).copied().unwrap_or(0);
    Some(sign * secs)
}

/// `HH:mm[:ss[.fffffffff]]` + offset -> (seconds of day, nanos, offset seconds).
fn parse_offset_time(s: &str) -> Option<(i64, u32, i64)> {
    let split = s.find(['Z', '+', '-'])?;
    let (time, offset) = s.split_at(split);
    let (secs, nanos) = parse_time(time)?;
    Some((secs, nanos, parse_offset(offset)?))
}

fn parse_time(time: &str) -> Option<(i64, u32)> {
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let p: Vec<i64> = hms
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let secs = p.first()? * 3600 + p.get(1)? * 60 + p.get(2).copied().unwrap_or(0);
    let nanos = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}")[..9].parse().ok()?
    };
    Some((secs, nanos))
}

/// ISO offset date-time -> (local seconds since epoch, nanos, offset seconds).
fn parse_offset_datetime(s: &str) -> Option<(i64, u32, i64)> {
    let (date, rest) = s.split_once('T')?;
    let neg_year = date.starts_with('-');
    let d: Vec<i64> = date
        .trim_start_matches('-')
        .split('-')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let year = if neg_year { -d[0] } else { d[0] };
    let days = days_from_civil(year, *d.get(1)?, *d.get(2)?);
    let (secs, nanos, offset) = parse_offset_time(rest)?;
    Some((days * 86_400 + secs, nanos, offset))
}

fn format_offset(offset: i64) -> String {
    if offset == 0 {
        return "Z".to_owned();
    }
    let sign = if offset < 0 { '-' } else { '+' };
    let a = offset.abs();
    let mut out = format!("{sign}{:02}:{:02}", a / 3600, a / 60 % 60);
    if a % 60 != 0 {
        out.push_str(&format!(":{:02}", a % 60));
    }
    out
}

fn format_time(secs_of_day: i64, nanos: u32) -> String {
    let mut out = format!(
        "{:02}:{:02}:{:02}",
        secs_of_day / 3600,
        secs_of_day / 60 % 60,
        secs_of_day % 60
    );
    if nanos > 0 {
        let f = format!("{nanos:09}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    out
}

/// Java's `ISO_OFFSET_DATE_TIME` rendering of a local date-time with its offset.
fn format_offset_datetime(local_secs: i64, nanos: u32, offset: i64) -> String {
    let (y, m, d) = civil_from_days(local_secs.div_euclid(86_400));
    format!(
        "{y:04}-{m:02}-{d:02}T{}{}",
        format_time(local_secs.rem_euclid(86_400), nanos),
        format_offset(offset)
    )
}
