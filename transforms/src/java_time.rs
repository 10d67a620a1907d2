//! Java's `SimpleDateFormat` in UTC, as TimestampRouter and TimestampConverter use it, plus the
//! civil-calendar arithmetic they need (proleptic Gregorian, epoch milliseconds).
//!
//! Supported pattern letters: `G y M L d D E u a H k K h m s S z Z X` and quoted text
//! (`'...'`, `''` for a quote). `Y w W F` (week-based fields) are rejected with a clear error
//! rather than formatted differently from Java. Every other ASCII letter is illegal, as in
//! Java ("Illegal pattern character 'q'"). Formatting is exact for the supported letters;
//! parsing is lenient like Java's default (out-of-range fields roll over), with the abutting
//! numeric field rule (`yyyyMMdd` parses `20240131`).
//!
//! Invariant: every function here is pure and works in UTC, the only zone these transforms use.

pub use headwater_api::civil::civil_from_days;
use std::time::{SystemTime, UNIX_EPOCH};

const MS_PER_DAY: i64 = 86_400_000;
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Days since 1970-01-01 of a proleptic Gregorian date (months may be out of 1..=12).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let (year, month) = {
        let m0 = month - 1;
        (year + m0.div_euclid(12), m0.rem_euclid(12) + 1)
    };
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468 + (day - 1)
}

/// The broken-down UTC fields of an epoch-millisecond instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub millis: u32,
    /// 1 = Monday ... 7 = Sunday.
    pub weekday: u32,
    /// 1-based day of the year.
    pub day_of_year: u32,
}

impl Civil {
    pub fn from_millis(ms: i64) -> Civil {
        let days = ms.div_euclid(MS_PER_DAY);
        let rem = ms.rem_euclid(MS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: (rem / 3_600_000) as u32,
            minute: (rem / 60_000 % 60) as u32,
            second: (rem / 1000 % 60) as u32,
            millis: (rem % 1000) as u32,
            weekday: ((days + 3).rem_euclid(7) + 1) as u32,
            day_of_year: (days - days_from_civil(year, 1, 1) + 1) as u32,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Item {
    Literal(String),
    Field(char, usize),
}

/// A compiled `SimpleDateFormat` pattern (UTC).
#[derive(Clone, Debug)]
pub struct SimpleDateFormat {
    pattern: String,
    items: Vec<Item>,
}

impl SimpleDateFormat {
    /// Compiles a pattern; the error reads like Java's `IllegalArgumentException` message.
    pub fn new(pattern: &str) -> Result<SimpleDateFormat, String> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut items: Vec<Item> = Vec::new();
        let mut lit = String::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '\'' {
                if chars.get(i + 1) == Some(&'\'') {
                    lit.push('\'');
                    i += 2;
                    continue;
                }
                let mut j = i + 1;
                loop {
                    match chars.get(j) {
                        None => return Err("Unterminated quote".to_owned()),
                        Some('\'') if chars.get(j + 1) == Some(&'\'') => {
                            lit.push('\'');
                            j += 2;
                        }
                        Some('\'') => break,
                        Some(&ch) => {
                            lit.push(ch);
                            j += 1;
                        }
                    }
                }
                i = j + 1;
            } else if c.is_ascii_alphabetic() {
                let mut n = 1;
                while chars.get(i + n) == Some(&c) {
                    n += 1;
                }
                match c {
                    'G' | 'y' | 'M' | 'L' | 'd' | 'D' | 'E' | 'u' | 'a' | 'H' | 'k' | 'K' | 'h'
                    | 'm' | 's' | 'S' | 'z' | 'Z' | 'X' => {}
                    'Y' | 'w' | 'W' | 'F' => {
                        return Err(format!(
                        "Pattern character '{c}' (week-based field) is not supported by Headwater"
                    ))
                    }
                    _ => return Err(format!("Illegal pattern character '{c}'")),
                }
                if c == 'X' && n > 3 {
                    return Err("invalid ISO 8601 format: length=".to_owned() + &n.to_string());
                }
                if !lit.is_empty() {
                    items.push(Item::Literal(std::mem::take(&mut lit)));
                }
                items.push(Item::Field(c, n));
                i += n;
            } else {
                lit.push(c);
                i += 1;
            }
        }
        if !lit.is_empty() {
            items.push(Item::Literal(lit));
        }
        Ok(SimpleDateFormat {
            pattern: pattern.to_owned(),
            items,
        })
    }

    /// The pattern as given (`toPattern()`).
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Formats epoch milliseconds in UTC.
    pub fn format(&self, ms: i64) -> String {
        let c = Civil::from_millis(ms);
        let mut out = String::with_capacity(self.pattern.len() + 8);
        for item in &self.items {
            match item {
                Item::Literal(s) => out.push_str(s),
                Item::Field(letter, n) => format_field(&mut out, &c, *letter, *n),
            }
        }
        out
    }

    /// Parses text into epoch milliseconds (lenient, UTC unless the text carries an offset).
    pub fn parse(&self, text: &str) -> Result<i64, String> {
        let unparseable = || format!("Unparseable date: \"{text}\"");
        let chars: Vec<char> = text.chars().collect();
        let mut pos = 0;
        let (mut year, mut month, mut day) = (1970i64, 1i64, 1i64);
        let mut day_of_year: Option<i64> = None;
        let (mut hour, mut minute, mut second, mut millis) = (0i64, 0i64, 0i64, 0i64);
        let mut hour12: Option<i64> = None;
        let mut pm: Option<bool> = None;
        let mut bc = false;
        let mut offset_ms = 0i64;
        for (idx, item) in self.items.iter().enumerate() {
            match item {
                Item::Literal(s) => {
                    for expected in s.chars() {
                        if chars.get(pos) != Some(&expected) {
                            return Err(unparseable());
                        }
                        pos += 1;
                    }
                }
                Item::Field(letter, n) => {
                    let abutting = matches!(
                        self.items.get(idx + 1),
                        Some(Item::Field(next, next_n)) if is_numeric(*next, *next_n)
                    );
                    match letter {
                        'M' | 'L' if *n >= 3 => {
                            let m =
                                match_name(&chars, &mut pos, &MONTHS).ok_or_else(unparseable)?;
                            month = m as i64 + 1;
                        }
                        'E' => {
                            match_name(&chars, &mut pos, &DAYS).ok_or_else(unparseable)?;
                        }
                        'a' => {
                            let ampm = match_name(&chars, &mut pos, &["AM", "PM"])
                                .ok_or_else(unparseable)?;
                            pm = Some(ampm == 1);
                        }
                        'G' => {
                            let era = match_name(&chars, &mut pos, &["BC", "AD"])
                                .ok_or_else(unparseable)?;
                            bc = era == 0;
                        }
                        'z' | 'Z' | 'X' => {
                            offset_ms = parse_offset(&chars, &mut pos).ok_or_else(unparseable)?;
                        }
                        _ => {
                            let limit = if abutting { *n } else { usize::MAX };
                            let (value, digits) =
                                parse_number(&chars, &mut pos, limit).ok_or_else(unparseable)?;
                            match letter {
                                'y' => {
                                    year = if *n <= 2 && digits == 2 {
                                        two_digit_year(value)
                                    } else {
                                        value
                                    };
                                }
                                'M' | 'L' => month = value,
                                'd' => day = value,
                                'D' => day_of_year = Some(value),
                                'u' => {}
                                'H' => hour = value,
                                'k' => hour = if value == 24 { 0 } else { value },
                                'K' => hour12 = Some(value),
                                'h' => hour12 = Some(if value == 12 { 0 } else { value }),
                                'm' => minute = value,
                                's' => second = value,
                                'S' => millis = value,
                                _ => return Err(unparseable()),
                            }
                        }
                    }
                }
            }
        }
        // 'a' only applies to the 12-hour fields (Java ignores it with H and k).
        if let Some(h) = hour12 {
            hour = h + if pm == Some(true) { 12 } else { 0 };
        }
        if bc {
            year = 1 - year;
        }
        let days = match day_of_year {
            Some(doy) => days_from_civil(year, 1, 1) + doy - 1,
            None => days_from_civil(year, month, day),
        };
        Ok(
            days * MS_PER_DAY + hour * 3_600_000 + minute * 60_000 + second * 1000 + millis
                - offset_ms,
        )
    }
}

fn is_numeric(letter: char, n: usize) -> bool {
    match letter {
        'M' | 'L' => n < 3,
        'y' | 'd' | 'D' | 'u' | 'H' | 'k' | 'K' | 'h' | 'm' | 's' | 'S' => true,
        _ => false,
    }
}

fn pad(out: &mut String, value: i64, width: usize) {
    let s = value.abs().to_string();
    if value < 0 {
        out.push('-');
    }
    for _ in s.len()..width {
        out.push('0');
    }
    out.push_str(&s);
}

fn format_field(out: &mut String, c: &Civil, letter: char, n: usize) {
    match letter {
        'G' => out.push_str(if c.year > 0 { "AD" } else { "BC" }),
        'y' => {
            let y = if c.year > 0 { c.year } else { 1 - c.year };
            if n == 2 {
                pad(out, y % 100, 2);
            } else {
                pad(out, y, n);
            }
        }
        'M' | 'L' => match n {
            1 | 2 => pad(out, c.month.into(), n),
            3 => out.push_str(&MONTHS[c.month as usize - 1][..3]),
            _ => out.push_str(MONTHS[c.month as usize - 1]),
        },
        'd' => pad(out, c.day.into(), n),
        'D' => pad(out, c.day_of_year.into(), n),
        'E' => {
            let name = DAYS[c.weekday as usize - 1];
            out.push_str(if n >= 4 { name } else { &name[..3] });
        }
        'u' => pad(out, c.weekday.into(), n),
        'a' => out.push_str(if c.hour < 12 { "AM" } else { "PM" }),
        'H' => pad(out, c.hour.into(), n),
        'k' => pad(out, if c.hour == 0 { 24 } else { c.hour.into() }, n),
        'K' => pad(out, (c.hour % 12).into(), n),
        'h' => pad(
            out,
            if c.hour.is_multiple_of(12) {
                12
            } else {
                (c.hour % 12).into()
            },
            n,
        ),
        'm' => pad(out, c.minute.into(), n),
        's' => pad(out, c.second.into(), n),
        'S' => pad(out, c.millis.into(), n),
        'z' => out.push_str(if n >= 4 {
            "Coordinated Universal Time"
        } else {
            "UTC"
        }),
        'Z' => out.push_str("+0000"),
        'X' => out.push('Z'),
        _ => {}
    }
}

fn match_name(chars: &[char], pos: &mut usize, names: &[&str]) -> Option<usize> {
    let rest: String = chars[*pos..].iter().collect();
    let lower = rest.to_ascii_lowercase();
    // Full names first, then three-letter abbreviations (Java tries both).
    for (i, name) in names.iter().enumerate() {
        if lower.starts_with(&name.to_ascii_lowercase()) {
            *pos += name.chars().count();
            return Some(i);
        }
    }
    for (i, name) in names.iter().enumerate() {
        let short: String = name.chars().take(3).collect();
        if short.len() == 3 && lower.starts_with(&short.to_ascii_lowercase()) {
            *pos += 3;
            return Some(i);
        }
    }
    None
}

fn parse_number(chars: &[char], pos: &mut usize, limit: usize) -> Option<(i64, usize)> {
    let mut negative = false;
    if chars.get(*pos) == Some(&'-') && limit == usize::MAX {
        negative = true;
        *pos += 1;
    }
    let start = *pos;
    let mut value: i64 = 0;
    while *pos < chars.len() && *pos - start < limit {
        let d = chars[*pos].to_digit(10)?;
        value = value.checked_mul(10)?.checked_add(d.into())?;
        *pos += 1;
        if *pos < chars.len() && !chars[*pos].is_ascii_digit() {
            break;
        }
    }
    let digits = *pos - start;
    (digits > 0).then_some((if negative { -value } else { value }, digits))
}

fn parse_offset(chars: &[char], pos: &mut usize) -> Option<i64> {
    let rest: String = chars[*pos..].iter().collect();
    for (prefix, len) in [("UTC", 3), ("GMT", 3), ("Z", 1)] {
        if rest.starts_with(prefix) {
            *pos += len;
            if !rest[len..].starts_with(['+', '-']) {
                return Some(0);
            }
            break;
        }
    }
    let sign = match chars.get(*pos) {
        Some('+') => 1,
        Some('-') => -1,
        _ => return None,
    };
    *pos += 1;
    let digits: String = chars[*pos..]
        .iter()
        .take_while(|c| c.is_ascii_digit() || **c == ':')
        .collect();
    *pos += digits.chars().count();
    let digits: String = digits.chars().filter(char::is_ascii_digit).collect();
    let (h, m) = match digits.len() {
        1 | 2 => (digits.parse::<i64>().ok()?, 0),
        3 | 4 => (
            digits[..digits.len() - 2].parse::<i64>().ok()?,
            digits[digits.len() - 2..].parse::<i64>().ok()?,
        ),
        _ => return None,
    };
    Some(sign * (h * 3_600_000 + m * 60_000))
}

/// Java's two-digit year rule: the century that puts the year within 80 years before and 20
/// years after now.
fn two_digit_year(yy: i64) -> i64 {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let now_year = Civil::from_millis(now_ms).year;
    let start = now_year - 80;
    let mut year = start - start.rem_euclid(100) + yy;
    if year < start {
        year += 100;
    }
    year
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2024-02-29T13:05:09.007Z, a Thursday, day 60 of a leap year.
    const T: i64 = 1_709_211_909_007;

    #[test]
    fn civil_round_trip() {
        for days in [-719_468, -1, 0, 1, 59, 19_782, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m.into(), d.into()), days);
        }
        let c = Civil::from_millis(T);
        assert_eq!(
            (c.year, c.month, c.day, c.hour, c.minute, c.second, c.millis),
            (2024, 2, 29, 13, 5, 9, 7)
        );
        assert_eq!((c.weekday, c.day_of_year), (4, 60));
        let before_epoch = Civil::from_millis(-1);
        assert_eq!(
            (before_epoch.year, before_epoch.hour, before_epoch.millis),
            (1969, 23, 999)
        );
    }

    #[test]
    fn formats_like_java() {
        let f = |p: &str| SimpleDateFormat::new(p).unwrap().format(T);
        assert_eq!(f("yyyyMMdd"), "20240229");
        assert_eq!(
            f("yyyy-MM-dd'T'HH:mm:ss.SSSZ"),
            "2024-02-29T13:05:09.007+0000"
        );
        assert_eq!(f("yy/M/d h:m:s a"), "24/2/29 1:5:9 PM");
        assert_eq!(f("EEE, d MMM yyyy"), "Thu, 29 Feb 2024");
        assert_eq!(f("EEEE MMMM D G"), "Thursday February 60 AD");
        assert_eq!(f("'week''s' HH 'o''clock' X z"), "week's 13 o'clock Z UTC");
        assert_eq!(f("S k K u"), "7 13 1 4");
        assert_eq!(SimpleDateFormat::new("HH:mm").unwrap().format(0), "00:00");
    }

    #[test]
    fn parses_like_java() {
        let p = |pat: &str, text: &str| SimpleDateFormat::new(pat).unwrap().parse(text);
        assert_eq!(
            p("yyyy-MM-dd'T'HH:mm:ss.SSS", "2024-02-29T13:05:09.007"),
            Ok(T)
        );
        assert_eq!(p("yyyyMMddHHmmssSSS", "20240229130509007"), Ok(T));
        assert_eq!(p("dd MMM yyyy", "29 Feb 2024"), Ok(T - T % MS_PER_DAY));
        assert_eq!(
            p("yyyy-MM-dd HH:mm Z", "2024-02-29 15:05 +0200"),
            Ok(T - 9_007)
        );
        assert_eq!(p("hh:mm a", "01:05 PM"), Ok(13 * 3_600_000 + 5 * 60_000));
        // Lenient: Feb 30 rolls over to Mar 1.
        assert_eq!(p("yyyy-MM-dd", "2023-02-29"), p("yyyy-MM-dd", "2023-03-01"));
        assert_eq!(
            p("yyyy-MM-dd", "2024/02/29").unwrap_err(),
            "Unparseable date: \"2024/02/29\""
        );
    }

    #[test]
    fn bad_patterns_are_rejected() {
        assert_eq!(
            SimpleDateFormat::new("yyyy-qq").unwrap_err(),
            "Illegal pattern character 'q'"
        );
        assert!(SimpleDateFormat::new("'open").is_err());
        assert!(SimpleDateFormat::new("YYYY-ww")
            .unwrap_err()
            .contains("not supported by Headwater"));
    }
}
