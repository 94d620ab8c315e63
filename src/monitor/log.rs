//! The CRI container log format kubelet reads (`kubectl logs`): one line per
//! record, `TIMESTAMP STREAM TAG CONTENT`, where TIMESTAMP is RFC 3339 with
//! nanoseconds, STREAM is `stdout` or `stderr`, and TAG is `F` for a full line
//! or `P` for a part of a longer one. Lines longer than the limit are split
//! into `P` parts ending with an `F`; a last unterminated line is written as
//! full when the stream ends, so nothing is lost at exit.

use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest content of one log record (kubelet's and containerd's 16 KiB).
pub const MAX_LINE: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Splits one stream's bytes into CRI log records.
#[derive(Debug)]
pub struct LineSplitter {
    stream: Stream,
    pending: Vec<u8>,
}

impl LineSplitter {
    pub fn new(stream: Stream) -> Self {
        Self { stream, pending: Vec::new() }
    }

    /// Feeds bytes read from the stream; writes every complete record to `out`.
    pub fn feed(&mut self, mut data: &[u8], out: &mut impl Write) -> io::Result<()> {
        while !data.is_empty() {
            match data.iter().position(|b| *b == b'\n') {
                Some(nl) if self.pending.len() + nl <= MAX_LINE => {
                    self.pending.extend_from_slice(&data[..nl]);
                    self.emit(true, out)?;
                    data = &data[nl + 1..];
                }
                _ => {
                    let room = MAX_LINE - self.pending.len();
                    let take = room.min(data.len());
                    self.pending.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.pending.len() == MAX_LINE && !data.is_empty() && data[0] != b'\n' {
                        self.emit(false, out)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The stream ended: a pending unterminated line becomes a full record.
    pub fn finish(&mut self, out: &mut impl Write) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.emit(true, out)?;
        }
        Ok(())
    }

    fn emit(&mut self, full: bool, out: &mut impl Write) -> io::Result<()> {
        let mut record = Vec::with_capacity(self.pending.len() + 48);
        record.extend_from_slice(rfc3339_nano(SystemTime::now()).as_bytes());
        record.push(b' ');
        record.extend_from_slice(self.stream.name().as_bytes());
        record.extend_from_slice(if full { b" F " } else { b" P " });
        record.extend_from_slice(&self.pending);
        record.push(b'\n');
        self.pending.clear();
        // One write per record, so records from two streams never interleave.
        out.write_all(&record)
    }
}

/// `2026-11-21T15:04:05.123456789Z`: RFC 3339 in UTC with nanoseconds.
pub fn rfc3339_nano(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_nanos()
    )
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn records(out: &[u8]) -> Vec<(String, String, String)> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| {
                let mut parts = l.splitn(4, ' ');
                let _ts = parts.next().unwrap();
                (parts.next().unwrap().into(), parts.next().unwrap().into(), parts.next().unwrap_or("").into())
            })
            .collect()
    }

    #[test]
    fn timestamps_are_rfc3339_nano_utc() {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        assert_eq!(rfc3339_nano(t), "2023-11-14T22:13:20.000000005Z");
        assert_eq!(rfc3339_nano(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert!(rfc3339_nano(leap).starts_with("2000-02-29T00:00:00"));
    }

    #[test]
    fn lines_split_across_reads_are_joined() {
        let mut s = LineSplitter::new(Stream::Stdout);
        let mut out = Vec::new();
        s.feed(b"hel", &mut out).unwrap();
        s.feed(b"lo\nwor", &mut out).unwrap();
        s.feed(b"ld\n\n", &mut out).unwrap();
        assert_eq!(
            records(&out),
            vec![
                ("stdout".into(), "F".into(), "hello".into()),
                ("stdout".into(), "F".into(), "world".into()),
                ("stdout".into(), "F".into(), "".into())
            ]
        );
    }

    #[test]
    fn long_lines_become_partial_records_and_nothing_is_lost_at_the_end() {
        let mut s = LineSplitter::new(Stream::Stderr);
        let mut out = Vec::new();
        let line = vec![b'x'; 40 * 1024];
        s.feed(&line, &mut out).unwrap();
        s.feed(b"\ntail", &mut out).unwrap();
        s.finish(&mut out).unwrap();
        let recs = records(&out);
        assert_eq!(recs.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(), vec!["P", "P", "F", "F"]);
        assert_eq!(recs[0].2.len(), MAX_LINE);
        assert_eq!(recs[1].2.len(), MAX_LINE);
        assert_eq!(recs[2].2.len(), 40 * 1024 - 2 * MAX_LINE);
        assert_eq!(recs[3], ("stderr".into(), "F".into(), "tail".into()));
        let joined: usize = recs[..3].iter().map(|r| r.2.len()).sum();
        assert_eq!(joined, 40 * 1024);
    }

    #[test]
    fn a_line_of_exactly_the_limit_is_one_full_record() {
        let mut s = LineSplitter::new(Stream::Stdout);
        let mut out = Vec::new();
        let mut line = vec![b'y'; MAX_LINE];
        line.push(b'\n');
        s.feed(&line, &mut out).unwrap();
        let recs = records(&out);
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].1, "F");
    }
}
