//! Event timestamps: RFC 3339 UTC with microsecond precision.

use time::OffsetDateTime;

/// Formats an instant as `YYYY-MM-DDTHH:MM:SS.ffffffZ` (pure; the caller owns the clock).
pub fn format_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339_utc_with_microseconds() {
        let t = time::macros::datetime!(2026-11-21 20:54:35.123456789 +02:00);
        assert_eq!(format_time(t), "2026-11-21T18:54:35.123456Z");
    }
}
