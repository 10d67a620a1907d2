//! Binlog positions and what mysql_common leaves unparsed: MariaDB GTID events and GTID
//! positions, MySQL GTID sets, the checksum trap of the first ROTATE event, and the
//! compressed MariaDB event types (refused loudly, never skipped).
//!
//! Invariants: a [`MariaGtidPos`] keeps the last sequence number per replication domain, which
//! is exactly what `@slave_connect_state` expects; a [`MySqlGtidSet`] keeps merged intervals
//! per source UUID, formatted as MySQL prints `gtid_executed`.

use std::collections::BTreeMap;

/// MariaDB event types mysql_common does not parse.
pub mod mariadb_event {
    pub const ANNOTATE_ROWS: u8 = 160;
    pub const BINLOG_CHECKPOINT: u8 = 161;
    pub const GTID: u8 = 162;
    pub const GTID_LIST: u8 = 163;
    pub const START_ENCRYPTION: u8 = 164;
    pub const QUERY_COMPRESSED: u8 = 165;
    /// 166..=171: WRITE/UPDATE/DELETE_ROWS_COMPRESSED_EVENT(_V1).
    pub const FIRST_ROWS_COMPRESSED: u8 = 166;
    pub const LAST_ROWS_COMPRESSED: u8 = 171;
}

/// Whether an event type is one of MariaDB's compressed events (`log_bin_compress=ON`).
pub fn is_compressed(event_type: u8) -> bool {
    event_type == mariadb_event::QUERY_COMPRESSED
        || (mariadb_event::FIRST_ROWS_COMPRESSED..=mariadb_event::LAST_ROWS_COMPRESSED)
            .contains(&event_type)
}

/// A MariaDB GTID event body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MariaGtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
    /// FL_STANDALONE: the event group is one statement with no COMMIT/XID (DDL).
    pub standalone: bool,
}

impl MariaGtid {
    /// Parses the body (`seq_no u64 LE, domain_id u32 LE, flags u8`); the server id comes from
    /// the event header.
    pub fn parse(body: &[u8], server: u32) -> Option<MariaGtid> {
        if body.len() < 13 {
            return None;
        }
        let seq = u64::from_le_bytes(body[0..8].try_into().ok()?);
        let domain = u32::from_le_bytes(body[8..12].try_into().ok()?);
        Some(MariaGtid {
            domain,
            server,
            seq,
            standalone: body[12] & 1 != 0,
        })
    }
}

impl std::fmt::Display for MariaGtid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

/// A MariaDB GTID position: the last GTID per domain (`0-1-5,1-2-9`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MariaGtidPos(BTreeMap<u32, (u32, u64)>);

impl MariaGtidPos {
    pub fn parse(s: &str) -> Result<MariaGtidPos, String> {
        let mut m = BTreeMap::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let mut it = part.split('-');
            let (Some(d), Some(sv), Some(sq), None) = (it.next(), it.next(), it.next(), it.next())
            else {
                return Err(format!(
                    "{part:?} is not a MariaDB GTID (domain-server-seq)"
                ));
            };
            let bad = |_| format!("{part:?} is not a MariaDB GTID (domain-server-seq)");
            m.insert(
                d.parse().map_err(bad)?,
                (sv.parse().map_err(bad)?, sq.parse().map_err(bad)?),
            );
        }
        Ok(MariaGtidPos(m))
    }
    pub fn apply(&mut self, g: &MariaGtid) {
        self.0.insert(g.domain, (g.server, g.seq));
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for MariaGtidPos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(d, (s, q))| format!("{d}-{s}-{q}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// A MySQL GTID set (`uuid:1-5:7,uuid2:1-3`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MySqlGtidSet(BTreeMap<String, Vec<(u64, u64)>>);

impl MySqlGtidSet {
    pub fn parse(s: &str) -> Result<MySqlGtidSet, String> {
        let mut set = MySqlGtidSet::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let mut it = part.split(':');
            let uuid = it.next().unwrap_or_default().to_ascii_lowercase();
            for iv in it {
                let (a, b) = iv.split_once('-').unwrap_or((iv, iv));
                let bad = |_| format!("{part:?} is not a MySQL GTID set");
                let (a, b): (u64, u64) = (a.parse().map_err(bad)?, b.parse().map_err(bad)?);
                for g in [a, b] {
                    set.add(&uuid, g);
                }
                set.0.entry(uuid.clone()).or_default().push((a, b));
                set.normalise(&uuid);
            }
        }
        Ok(set)
    }
    fn normalise(&mut self, uuid: &str) {
        if let Some(v) = self.0.get_mut(uuid) {
            v.sort_unstable();
            let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
            for &(a, b) in v.iter() {
                match out.last_mut() {
                    Some(l) if a <= l.1 + 1 => l.1 = l.1.max(b),
                    _ => out.push((a, b)),
                }
            }
            *v = out;
        }
    }
    pub fn add(&mut self, uuid: &str, gno: u64) {
        self.0
            .entry(uuid.to_ascii_lowercase())
            .or_default()
            .push((gno, gno));
        self.normalise(&uuid.to_ascii_lowercase());
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for MySqlGtidSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(u, ivs)| {
                let mut s = u.clone();
                for (a, b) in ivs {
                    if a == b {
                        s.push_str(&format!(":{a}"));
                    } else {
                        s.push_str(&format!(":{a}-{b}"));
                    }
                }
                s
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Formats a MySQL GTID_EVENT's source id (16 bytes) as a UUID.
pub fn uuid_string(sid: &[u8; 16]) -> String {
    let h: String = sid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The file name of a ROTATE event. The first (artificial) ROTATE arrives before the format
/// description event, so when binlog checksums are on its body still ends with the 4-byte
/// checksum, which mysql_common then reads as part of the name.
pub fn rotate_file_name(raw: &[u8], before_fde: bool, checksums_on: bool) -> String {
    let raw = if before_fde && checksums_on && raw.len() >= 4 {
        &raw[..raw.len() - 4]
    } else {
        raw
    };
    String::from_utf8_lossy(raw).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_gtid_event_and_position() {
        // Captured body of a MariaDB 10.11 GTID event: seq 7, domain 0, flags 0x0c.
        let body = [7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0c];
        let g = MariaGtid::parse(&body, 41234).unwrap();
        assert_eq!(g.to_string(), "0-41234-7");
        assert!(!g.standalone);
        let ddl = MariaGtid::parse(&[9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0x21], 1).unwrap();
        assert!(ddl.standalone);
        assert_eq!(ddl.domain, 1);
        let mut pos = MariaGtidPos::parse("0-1-5").unwrap();
        pos.apply(&g);
        pos.apply(&ddl);
        assert_eq!(pos.to_string(), "0-41234-7,1-1-9");
        assert!(MariaGtidPos::parse("x-1").is_err());
        assert!(MariaGtid::parse(&[0; 5], 1).is_none());
    }

    #[test]
    fn mysql_gtid_sets_merge() {
        let mut s = MySqlGtidSet::parse("3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5:7").unwrap();
        s.add("3e11fa47-71ca-11e1-9e33-c80aa9429562", 6);
        assert_eq!(s.to_string(), "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7");
        let sid = [
            0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42,
            0x95, 0x62,
        ];
        assert_eq!(uuid_string(&sid), "3e11fa47-71ca-11e1-9e33-c80aa9429562");
    }

    #[test]
    fn rotate_checksum_trap_and_compressed_types() {
        assert_eq!(
            rotate_file_name(b"mariadb-bin.000001\xe2\x2b\x08\x70", true, true),
            "mariadb-bin.000001"
        );
        assert_eq!(
            rotate_file_name(b"mariadb-bin.000002", false, true),
            "mariadb-bin.000002"
        );
        assert!(
            is_compressed(165) && is_compressed(169) && !is_compressed(162) && !is_compressed(30)
        );
    }
}
