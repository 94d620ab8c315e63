//! Pressure stall information of a cgroup: `cpu.pressure`, `memory.pressure`
//! and `io.pressure` (cgroup v2 with PSI in the kernel). Each holds a `some`
//! line (some task waited) and, except `cpu.pressure` before Linux 5.13, a
//! `full` line (every task waited):
//! `some avg10=0.12 avg60=0.05 avg300=0.01 total=123456` (total in µs).
//! A file or line the kernel does not write is None, never zeros.

use serde::Serialize;

use super::files::CgroupDir;

/// One line of a pressure file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct PressureLine {
    /// Share of wall time stalled over the last 10, 60 and 300 s, in percent.
    pub(crate) avg10: f64,
    pub(crate) avg60: f64,
    pub(crate) avg300: f64,
    /// Time stalled since the cgroup was made, in microseconds.
    pub(crate) total_us: u64,
}

/// One pressure file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Pressure {
    pub(crate) some: Option<PressureLine>,
    pub(crate) full: Option<PressureLine>,
}

/// The three pressure files of a cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct PressureStats {
    pub(crate) cpu: Option<Pressure>,
    pub(crate) memory: Option<Pressure>,
    pub(crate) io: Option<Pressure>,
}

/// Reads `cpu.pressure`, `memory.pressure` and `io.pressure` of `dir`.
pub(crate) fn read(dir: &CgroupDir) -> PressureStats {
    let file = |name: &str| dir.read(name).and_then(|text| parse(&text));
    PressureStats { cpu: file("cpu.pressure"), memory: file("memory.pressure"), io: file("io.pressure") }
}

/// Parses a pressure file; None when it has neither line.
pub(crate) fn parse(text: &str) -> Option<Pressure> {
    let mut pressure = Pressure::default();
    for line in text.lines() {
        let Some((kind, fields)) = line.split_once(' ') else { continue };
        let slot = match kind {
            "some" => &mut pressure.some,
            "full" => &mut pressure.full,
            _ => continue,
        };
        *slot = parse_line(fields);
    }
    (pressure.some.is_some() || pressure.full.is_some()).then_some(pressure)
}

/// `avg10=… avg60=… avg300=… total=…`; None unless all four are there.
fn parse_line(fields: &str) -> Option<PressureLine> {
    let (mut avg10, mut avg60, mut avg300, mut total_us) = (None, None, None, None);
    for field in fields.split_whitespace() {
        let (key, value) = field.split_once('=')?;
        match key {
            "avg10" => avg10 = value.parse().ok(),
            "avg60" => avg60 = value.parse().ok(),
            "avg300" => avg300 = value.parse().ok(),
            "total" => total_us = value.parse().ok(),
            _ => {}
        }
    }
    Some(PressureLine { avg10: avg10?, avg60: avg60?, avg300: avg300?, total_us: total_us? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_some_and_full_lines() {
        let p = parse(
            "some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
        )
        .unwrap();
        assert_eq!(p.some, Some(PressureLine { avg10: 1.5, avg60: 0.25, avg300: 0.0, total_us: 123456 }));
        assert_eq!(p.full.unwrap().total_us, 7);
    }

    #[test]
    fn a_missing_line_or_file_is_none_not_zero() {
        use std::fs;

        // cpu.pressure before Linux 5.13: no full line.
        let p = parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert!(p.some.is_some() && p.full.is_none());
        assert_eq!(parse(""), None);
        assert_eq!(parse("some avg10=oops avg60=0 avg300=0 total=0\n"), None, "a field that does not parse");
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("io.pressure"), "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n").unwrap();
        let all = read(&CgroupDir::open(dir.path()).unwrap());
        assert_eq!((all.cpu, all.memory), (None, None));
        assert_eq!(all.io.unwrap().some.unwrap().total_us, 5);
    }
}
