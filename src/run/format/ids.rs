//! Run ids, record ids and the UTC timestamps they are made of: what both stores (`crate::run::write::sqlite`,
//! `crate::run::write::pg`) and the writers (sweep, import, bisect) stamp rows with.

use std::time::{SystemTime, UNIX_EPOCH};

/// UTC now as RFC 3339 with milliseconds.
pub fn utc_now() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    format_utc(d.as_secs() as i64, d.subsec_millis())
}

/// Seconds since the epoch → `YYYY-MM-DDTHH:MM:SS.mmmZ` (proleptic Gregorian, Howard Hinnant's days-to-civil).
pub fn format_utc(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", sod / 3600, sod % 3600 / 60, sod % 60)
}

/// A new run id: UTC time to the second plus 4 hex digits, e.g. `20261121-120501-3fa2`. Sorts by time; the suffix
/// keeps two runs started in the same second apart.
pub fn new_run_id() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let t = format_utc(d.as_secs() as i64, 0);
    let salt = (d.subsec_nanos() ^ std::process::id().rotate_left(16)) & 0xffff;
    format!("{}{}{}-{}{}{}-{salt:04x}", &t[0..4], &t[5..7], &t[8..10], &t[11..13], &t[14..16], &t[17..19])
}

/// A record's id in a shared store: the same cell of the same run always gets the same id, whichever host stores
/// it and however often (a push repeated, a cell stored by a run that lost its server and pushed later), so that
/// inserting it twice stores it once. SHA-256 of run id, cell key and repetition, length-prefixed so that no two
/// different triples hash the same bytes; 32 hex digits.
pub fn record_id(run_id: &str, cell_key: &str, repetition: u32) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [run_id.as_bytes(), cell_key.as_bytes(), &repetition.to_le_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting_matches_known_dates() {
        assert_eq!(format_utc(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(format_utc(1_795_262_400, 0), "2026-11-21T12:00:00.000Z");
        let id = new_run_id();
        assert_eq!(id.len(), "20261121-120501-3fa2".len());
        assert!(id.chars().nth(8) == Some('-'));
    }

    #[test]
    fn record_ids_are_deterministic_and_distinct() {
        let a = record_id("20261121-120501-3fa2", "cpu|m|ngl=0|p|n=1|e1|r1", 1);
        assert_eq!(a, record_id("20261121-120501-3fa2", "cpu|m|ngl=0|p|n=1|e1|r1", 1));
        // Computed independently with Python's hashlib over the same length-prefixed bytes.
        assert_eq!(a, "32b31d59bbe17d95b2d9ca42a30cb972");
        // Inputs that differ only in where one field ends and the next begins differ.
        assert_ne!(record_id("ab", "c", 1), record_id("a", "bc", 1));
        assert_ne!(a, record_id("20261121-120501-3fa2", "cpu|m|ngl=0|p|n=1|e1|r1", 2));
        assert_ne!(a, record_id("20261121-120501-3fa3", "cpu|m|ngl=0|p|n=1|e1|r1", 1));
    }
}
