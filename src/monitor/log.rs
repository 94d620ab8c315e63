//! The CRI container log format kubelet reads (`kubectl logs`): one line per
//! record, `TIMESTAMP STREAM TAG CONTENT`, where TIMESTAMP is RFC 3339 with
//! nanoseconds, STREAM is `stdout` or `stderr`, and TAG is `F` for a full line
//! or `P` for a part of a longer one. Lines longer than the limit are split
//! into `P` parts ending with an `F`; a last unterminated line is written as
//! full when the stream ends, so nothing is lost at exit.
//!
//! Written against `core` alone (fixed buffers, no allocation): the monitor's
//! steady-state loop, a no_std program, compiles this same file.

/// Longest content of one log record (kubelet's and containerd's 16 KiB).
pub(crate) const MAX_LINE: usize = 16 * 1024;
/// Bytes of a timestamp: `2026-11-21T15:04:05.123456789Z`.
pub(crate) const TIMESTAMP_LEN: usize = 30;
/// Longest record: timestamp, ` stderr P `, content, newline.
pub(crate) const MAX_RECORD: usize = TIMESTAMP_LEN + 10 + MAX_LINE + 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static [u8] {
        match self {
            Stream::Stdout => b"stdout",
            Stream::Stderr => b"stderr",
        }
    }
}

/// Splits one stream's bytes into CRI log records.
pub(crate) struct LineSplitter {
    stream: Stream,
    pending: [u8; MAX_LINE],
    len: usize,
}

impl LineSplitter {
    pub(crate) const fn new(stream: Stream) -> Self {
        Self { stream, pending: [0; MAX_LINE], len: 0 }
    }

    /// Feeds bytes read from the stream at time `now` (seconds and
    /// nanoseconds since the epoch); hands each complete record to `sink`,
    /// whole, built in `scratch`.
    pub(crate) fn feed(
        &mut self,
        mut data: &[u8],
        now: (u64, u32),
        scratch: &mut [u8; MAX_RECORD],
        sink: &mut impl FnMut(&[u8]),
    ) {
        while !data.is_empty() {
            match data.iter().position(|b| *b == b'\n') {
                Some(nl) if self.len + nl <= MAX_LINE => {
                    self.pending[self.len..self.len + nl].copy_from_slice(&data[..nl]);
                    self.len += nl;
                    self.emit(true, now, scratch, sink);
                    data = &data[nl + 1..];
                }
                _ => {
                    let take = (MAX_LINE - self.len).min(data.len());
                    self.pending[self.len..self.len + take].copy_from_slice(&data[..take]);
                    self.len += take;
                    data = &data[take..];
                    if self.len == MAX_LINE && !data.is_empty() && data[0] != b'\n' {
                        self.emit(false, now, scratch, sink);
                    }
                }
            }
        }
    }

    /// The stream ended: a pending unterminated line becomes a full record.
    pub(crate) fn finish(&mut self, now: (u64, u32), scratch: &mut [u8; MAX_RECORD], sink: &mut impl FnMut(&[u8])) {
        if self.len > 0 {
            self.emit(true, now, scratch, sink);
        }
    }

    fn emit(&mut self, full: bool, now: (u64, u32), scratch: &mut [u8; MAX_RECORD], sink: &mut impl FnMut(&[u8])) {
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            scratch[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        let mut stamp = [0u8; TIMESTAMP_LEN];
        format_timestamp(now.0, now.1, &mut stamp);
        put(&stamp);
        put(b" ");
        put(self.stream.name());
        put(if full { b" F " } else { b" P " });
        put(&self.pending[..self.len]);
        put(b"\n");
        self.len = 0;
        // One write per record, so records from two streams never interleave.
        sink(&scratch[..at]);
    }
}

/// `2026-11-21T15:04:05.123456789Z`: RFC 3339 in UTC with nanoseconds.
pub(crate) fn format_timestamp(secs: u64, nanos: u32, out: &mut [u8; TIMESTAMP_LEN]) {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    let mut at = 0;
    let mut digits = |value: u64, width: usize, then: u8| {
        let mut v = value;
        for i in (0..width).rev() {
            out[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
        at += width;
        if then != 0 {
            out[at] = then;
            at += 1;
        }
    };
    digits(year.max(0) as u64, 4, b'-');
    digits(month as u64, 2, b'-');
    digits(day as u64, 2, b'T');
    digits(rem / 3600, 2, b':');
    digits(rem % 3600 / 60, 2, b':');
    digits(rem % 60, 2, b'.');
    digits(nanos as u64, 9, b'Z');
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

    const T: (u64, u32) = (1_700_000_000, 5);

    fn run(splitter: &mut LineSplitter, chunks: &[&[u8]], finish: bool) -> Vec<(String, String, String)> {
        let mut scratch = [0u8; MAX_RECORD];
        let mut out: Vec<u8> = Vec::new();
        for chunk in chunks {
            splitter.feed(chunk, T, &mut scratch, &mut |r| out.extend_from_slice(r));
        }
        if finish {
            splitter.finish(T, &mut scratch, &mut |r| out.extend_from_slice(r));
        }
        String::from_utf8_lossy(&out)
            .lines()
            .map(|l| {
                let mut parts = l.splitn(4, ' ');
                assert_eq!(parts.next().unwrap(), "2023-11-14T22:13:20.000000005Z");
                (parts.next().unwrap().into(), parts.next().unwrap().into(), parts.next().unwrap_or("").into())
            })
            .collect()
    }

    fn stamp(secs: u64, nanos: u32) -> String {
        let mut out = [0u8; TIMESTAMP_LEN];
        format_timestamp(secs, nanos, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn timestamps_are_rfc3339_nano_utc() {
        assert_eq!(stamp(1_700_000_000, 5), "2023-11-14T22:13:20.000000005Z");
        assert_eq!(stamp(0, 0), "1970-01-01T00:00:00.000000000Z");
        assert!(stamp(951_782_400, 0).starts_with("2000-02-29T00:00:00"));
        assert!(stamp(4_102_444_800, 999_999_999).starts_with("2100-01-01T00:00:00.999999999"));
    }

    #[test]
    fn lines_split_across_reads_are_joined() {
        let mut s = LineSplitter::new(Stream::Stdout);
        let records = run(&mut s, &[b"hel", b"lo\nwor", b"ld\n\n"], false);
        assert_eq!(
            records,
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
        let line = vec![b'x'; 40 * 1024];
        let records = run(&mut s, &[&line, b"\ntail"], true);
        assert_eq!(records.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(), vec!["P", "P", "F", "F"]);
        assert_eq!(records[0].2.len(), MAX_LINE);
        assert_eq!(records[1].2.len(), MAX_LINE);
        assert_eq!(records[2].2.len(), 40 * 1024 - 2 * MAX_LINE);
        assert_eq!(records[3], ("stderr".into(), "F".into(), "tail".into()));
    }

    #[test]
    fn a_line_of_exactly_the_limit_is_one_full_record() {
        let mut s = LineSplitter::new(Stream::Stdout);
        let mut line = vec![b'y'; MAX_LINE];
        line.push(b'\n');
        let records = run(&mut s, &[&line], false);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].1, "F");
        // Split exactly at the limit across two reads: still one full record.
        let mut s = LineSplitter::new(Stream::Stdout);
        let records = run(&mut s, &[&line[..MAX_LINE], b"\n"], false);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].1, "F");
    }
}
