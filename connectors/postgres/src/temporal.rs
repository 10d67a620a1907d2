//! Calendar arithmetic and Debezium's text forms for PostgreSQL dates and times.
//!
//! Invariants: pure functions on integers, proleptic Gregorian calendar (as PostgreSQL and
//! `java.time` use), no panics for any input (extreme values saturate or wrap exactly as
//! Debezium's Java code does, which the callers document).

/// Days between 1970-01-01 and 2000-01-01.
pub const PG_EPOCH_DAYS: i32 = 10_957;
/// Microseconds in a day.
pub const MICROS_PER_DAY: i64 = 86_400_000_000;
/// What pgjdbc reports for `infinity` timestamps (`PGStatement.DATE_POSITIVE_INFINITY`).
pub const POSITIVE_INFINITY_MILLIS: i64 = 9_223_372_036_825_200_000;
/// What pgjdbc reports for `-infinity` timestamps (`PGStatement.DATE_NEGATIVE_INFINITY`).
pub const NEGATIVE_INFINITY_MILLIS: i64 = -9_223_372_036_832_400_000;

pub use headwater_api::civil::{civil_from_days, days_from_civil};

use headwater_connector_common::text::push_digits;

/// Writes a year as `java.time` does in ISO dates: 4 digits, `+` above 9999, `-` below 0.
fn push_year(out: &mut String, year: i64) {
    use std::fmt::Write;
    if year > 9999 {
        let _ = write!(out, "+{year}");
    } else if year < 0 {
        let _ = write!(out, "-{:04}", -year);
    } else {
        push_digits(out, year as u64, 4);
    }
}

/// Writes `HH:MM:SS` and then the fraction of `micros_of_day` (0..86_400_000_000 inclusive of
/// 24:00) either with exactly `width` digits (`Some`) or trimmed of trailing zeros (`None`).
fn push_time(out: &mut String, micros_of_day: i64, width: Option<usize>) {
    let secs = micros_of_day.div_euclid(1_000_000);
    let frac = micros_of_day.rem_euclid(1_000_000) as u64;
    push_digits(out, (secs / 3600) as u64, 2);
    out.push(':');
    push_digits(out, ((secs / 60) % 60) as u64, 2);
    out.push(':');
    push_digits(out, (secs % 60) as u64, 2);
    match width {
        Some(0) => {}
        Some(w) => {
            out.push('.');
            if w <= 6 {
                push_digits(out, frac / 10u64.pow(6 - w as u32), w);
            } else {
                push_digits(out, frac, 6);
                out.extend(std::iter::repeat_n('0', w - 6));
            }
        }
        None => {
            if frac != 0 {
                let mut digits = frac;
                let mut width = 6;
                while digits.is_multiple_of(10) {
                    digits /= 10;
                    width -= 1;
                }
                out.push('.');
                push_digits(out, digits, width);
            }
        }
    }
}

/// Debezium's `ZonedTimestamp` text of a UTC instant in µs since 1970 with `width` fraction
/// digits: `2024-02-29T11:45:56.123456Z`.
pub fn zoned_timestamp(unix_micros: i64, width: Option<usize>) -> String {
    let days = unix_micros.div_euclid(MICROS_PER_DAY);
    let tod = unix_micros.rem_euclid(MICROS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    if (0..=9999).contains(&y) && width.is_none_or(|w| w <= 6) {
        // The common case, laid out in a stack buffer: 4-digit year, at most 6 fraction digits.
        return zoned_timestamp_short(y as u32, m, d, tod, width);
    }
    zoned_timestamp_general(y, m, d, tod, width)
}

/// [`zoned_timestamp`] of any date and fraction width.
fn zoned_timestamp_general(y: i64, m: u32, d: u32, tod: i64, width: Option<usize>) -> String {
    let mut out = String::with_capacity(32);
    push_year(&mut out, y);
    out.push('-');
    push_digits(&mut out, u64::from(m), 2);
    out.push('-');
    push_digits(&mut out, u64::from(d), 2);
    out.push('T');
    push_time(&mut out, tod, width);
    out.push('Z');
    out
}

/// [`zoned_timestamp`] of a year `0..=9999` with at most 6 fraction digits.
fn zoned_timestamp_short(y: u32, m: u32, d: u32, tod: i64, width: Option<usize>) -> String {
    fn put(buf: &mut [u8], mut value: u32) {
        for b in buf.iter_mut().rev() {
            *b = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
    let secs = (tod / 1_000_000) as u32;
    let frac = (tod % 1_000_000) as u32;
    let mut b = *b"0000-00-00T00:00:00.000000Z";
    put(&mut b[0..4], y);
    put(&mut b[5..7], m);
    put(&mut b[8..10], d);
    put(&mut b[11..13], secs / 3600);
    put(&mut b[14..16], (secs / 60) % 60);
    put(&mut b[17..19], secs % 60);
    let digits = match width {
        Some(w) => w,
        None if frac == 0 => 0,
        None => 6 - count_trailing_decimal_zeros(frac),
    };
    let mut end = 19;
    if digits > 0 {
        put(&mut b[20..26], frac);
        end = 20 + digits;
    }
    b[end] = b'Z';
    // Only ASCII digits and separators were written, so the check cannot fail.
    std::str::from_utf8(&b[..=end])
        .unwrap_or_default()
        .to_owned()
}

/// How many trailing decimal zeros a non-zero value has.
fn count_trailing_decimal_zeros(mut v: u32) -> usize {
    let mut n = 0;
    while v.is_multiple_of(10) {
        v /= 10;
        n += 1;
    }
    n
}

/// Debezium's `ZonedTime` text of a UTC time of day: `11:45:56.123456Z` (fraction trimmed).
pub fn zoned_time(micros_of_day: i64) -> String {
    let mut out = String::with_capacity(20);
    push_time(&mut out, micros_of_day.rem_euclid(MICROS_PER_DAY), None);
    out.push('Z');
    out
}

/// PostgreSQL's ISO text of a date (`2024-02-29`, `0044-03-15 BC`), as in range output.
pub fn pg_date_text(days_since_1970: i64) -> String {
    let (y, m, d) = civil_from_days(days_since_1970);
    if y <= 0 {
        format!("{:04}-{m:02}-{d:02} BC", 1 - y)
    } else {
        format!("{y:04}-{m:02}-{d:02}")
    }
}

/// PostgreSQL's ISO text of a timestamp without zone (`2024-02-29 13:45:56.123456`).
pub fn pg_timestamp_text(unix_micros: i64) -> String {
    let days = unix_micros.div_euclid(MICROS_PER_DAY);
    let tod = unix_micros.rem_euclid(MICROS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let mut out = String::with_capacity(32);
    use std::fmt::Write;
    let bc = y <= 0;
    let _ = write!(out, "{:04}-{m:02}-{d:02} ", if bc { 1 - y } else { y });
    push_time(&mut out, tod, None);
    if bc {
        out.push_str(" BC");
    }
    out
}

/// Debezium's `MicroDuration` of a PostgreSQL interval: months count 30.4375 days (365.25 / 12),
/// computed in doubles exactly as `MicroDuration.durationMicros` does, then truncated (and
/// saturated) to a long.
pub fn interval_micros(months: i32, days: i32, micros: i64) -> i64 {
    const DAYS_PER_MONTH_AVG: f64 = 365.25 / 12.0;
    let years = months / 12;
    let rem_months = months % 12;
    let hours = micros / 3_600_000_000;
    let minutes = (micros % 3_600_000_000) / 60_000_000;
    let seconds = (micros % 60_000_000) as f64 / 1e6;
    let total_months = f64::from(years) * 12.0 + f64::from(rem_months);
    let number_of_days = total_months * DAYS_PER_MONTH_AVG + f64::from(days);
    let number_of_seconds =
        (((number_of_days * 24.0 + hours as f64) * 60.0) + minutes as f64) * 60.0 + seconds;
    (number_of_seconds * 1e6) as i64
}

/// Debezium's `io.debezium.time.Interval` ISO-8601 text (`P1Y2M3DT4H5M6.789S`).
pub fn interval_iso(months: i32, days: i32, micros: i64) -> String {
    let years = months / 12;
    let rem_months = months % 12;
    let hours = micros / 3_600_000_000;
    let minutes = (micros % 3_600_000_000) / 60_000_000;
    let sec_micros = micros % 60_000_000;
    let whole = sec_micros / 1_000_000;
    let frac = (sec_micros % 1_000_000).abs();
    let seconds = if frac == 0 {
        format!("{whole}")
    } else {
        let sign = if sec_micros < 0 && whole == 0 {
            "-"
        } else {
            ""
        };
        let f = format!("{frac:06}");
        format!("{sign}{whole}.{}", f.trim_end_matches('0'))
    };
    format!("P{years}Y{rem_months}M{days}DT{hours}H{minutes}M{seconds}S")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_roundtrip() {
        for days in [-719_162i64, -1, 0, 19_782, 2_932_896, -1_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(-719_162), (1, 1, 1));
    }

    #[test]
    fn the_short_timestamp_text_is_the_general_one() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for case in 0..50_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // Years about -300..4000, and round values (trailing fraction zeros) often.
            let mut micros = (rng % (1u64 << 57)) as i64 - (1i64 << 56) / 3;
            if case % 3 == 0 {
                micros -= micros % 10i64.pow((case / 3 % 7) as u32);
            }
            let days = micros.div_euclid(MICROS_PER_DAY);
            let tod = micros.rem_euclid(MICROS_PER_DAY);
            let (y, m, d) = civil_from_days(days);
            for width in [None, Some(0), Some(1), Some(3), Some(6), Some(9)] {
                let general = zoned_timestamp_general(y, m, d, tod, width);
                assert_eq!(
                    zoned_timestamp(micros, width),
                    general,
                    "{micros} {width:?}"
                );
            }
        }
    }

    #[test]
    fn debezium_texts() {
        assert_eq!(
            zoned_timestamp(1_709_206_756_123_456, Some(6)),
            "2024-02-29T11:39:16.123456Z"
        );
        assert_eq!(zoned_timestamp(0, Some(6)), "1970-01-01T00:00:00.000000Z");
        assert_eq!(zoned_timestamp(0, None), "1970-01-01T00:00:00Z");
        assert_eq!(
            zoned_timestamp(1_500_000, Some(3)),
            "1970-01-01T00:00:01.500Z"
        );
        assert_eq!(zoned_time(42_356_123_456), "11:45:56.123456Z");
        assert_eq!(zoned_time(8 * 3_600_000_000), "08:00:00Z");
        assert_eq!(interval_micros(14, 3, 14_706_789_000), 37_091_106_789_000);
        assert_eq!(interval_micros(0, -1, -1_000_000), -86_401_000_000);
        assert_eq!(interval_micros(2_136_000_000, 0, 0), i64::MAX);
        assert_eq!(interval_iso(14, 3, 14_706_789_000), "P1Y2M3DT4H5M6.789S");
        assert_eq!(pg_date_text(19_782), "2024-02-29");
        assert_eq!(pg_timestamp_text(1_500_000), "1970-01-01 00:00:01.5");
    }
}
