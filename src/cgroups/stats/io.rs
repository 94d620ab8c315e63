//! Block I/O a cgroup has done, per device: bytes and operations read and
//! written. cgroup v2: `io.stat` (`8:0 rbytes=… wbytes=… rios=… wios=… …`),
//! which counts every request. cgroup v1 has two partial counts in the blkio
//! controller (`8:0 Read N` lines): the throttle files
//! (`blkio.throttle.io_service_bytes_recursive`, `…io_serviced_recursive`)
//! count a device's requests only once a throttle rule was ever set on it
//! (Linux 6.x sets throttling up lazily), the BFQ files (`blkio.bfq.…`) only
//! for devices BFQ schedules; where either counts, it counts all the
//! cgroup's I/O to that device, so the larger of the two is taken. A device
//! neither counts is left out, not reported as zero.

use std::collections::BTreeMap;

use serde::Serialize;

use super::files::CgroupDir;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct DeviceIo {
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) read_bytes: u64,
    pub(crate) write_bytes: u64,
    pub(crate) reads: u64,
    pub(crate) writes: u64,
}

/// cgroup v2: `io.stat` of `dir`; None when the file is missing (the io
/// controller is not enabled there).
pub(crate) fn read_v2(dir: &CgroupDir) -> Option<Vec<DeviceIo>> {
    dir.read("io.stat").map(|text| parse_v2(&text))
}

/// cgroup v1: the blkio directory `dir`; None when it has neither set of files.
pub(crate) fn read_v1(dir: &CgroupDir) -> Option<Vec<DeviceIo>> {
    let read = |file: &str| dir.read(file);
    let pair = |prefix: &str| {
        let bytes = read(&format!("{prefix}.io_service_bytes_recursive"))?;
        Some(parse_v1(&bytes, &read(&format!("{prefix}.io_serviced_recursive")).unwrap_or_default()))
    };
    match (pair("blkio.throttle"), pair("blkio.bfq")) {
        (None, None) => None,
        (throttle, bfq) => Some(larger(throttle.unwrap_or_default(), bfq.unwrap_or_default())),
    }
}

fn device(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

pub(crate) fn parse_v2(text: &str) -> Vec<DeviceIo> {
    let mut devices = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some((major, minor)) = fields.next().and_then(device) else { continue };
        let mut io = DeviceIo { major, minor, ..Default::default() };
        for field in fields {
            let Some((key, value)) = field.split_once('=') else { continue };
            let Ok(value) = value.parse() else { continue };
            match key {
                "rbytes" => io.read_bytes = value,
                "wbytes" => io.write_bytes = value,
                "rios" => io.reads = value,
                "wios" => io.writes = value,
                _ => {}
            }
        }
        devices.push(io);
    }
    devices.sort_by_key(|d| (d.major, d.minor));
    devices
}

/// One v1 pair (bytes, operations), devices in order.
pub(crate) fn parse_v1(service_bytes: &str, serviced: &str) -> Vec<DeviceIo> {
    let mut devices: BTreeMap<(u32, u32), DeviceIo> = BTreeMap::new();
    let mut add = |text: &str, bytes: bool| {
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            // The last line, `Total N`, names no device.
            let (Some((major, minor)), Some(op), Some(Ok(value))) =
                (fields.next().and_then(device), fields.next(), fields.next().map(str::parse::<u64>))
            else {
                continue;
            };
            let io = devices.entry((major, minor)).or_insert(DeviceIo { major, minor, ..Default::default() });
            match (op, bytes) {
                ("Read", true) => io.read_bytes = value,
                ("Write", true) => io.write_bytes = value,
                ("Read", false) => io.reads = value,
                ("Write", false) => io.writes = value,
                _ => {}
            }
        }
    };
    add(service_bytes, true);
    add(serviced, false);
    devices.into_values().collect()
}

/// Per device and field, the larger of two counts.
fn larger(a: Vec<DeviceIo>, b: Vec<DeviceIo>) -> Vec<DeviceIo> {
    let mut devices: BTreeMap<(u32, u32), DeviceIo> = a.into_iter().map(|d| ((d.major, d.minor), d)).collect();
    for d in b {
        let io = devices.entry((d.major, d.minor)).or_insert(DeviceIo {
            major: d.major,
            minor: d.minor,
            ..Default::default()
        });
        io.read_bytes = io.read_bytes.max(d.read_bytes);
        io.write_bytes = io.write_bytes.max(d.write_bytes);
        io.reads = io.reads.max(d.reads);
        io.writes = io.writes.max(d.writes);
    }
    devices.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_io_stat() {
        let text = "254:0 rbytes=4096 wbytes=8388608 rios=1 wios=64 dbytes=0 dios=0\n7:0 rbytes=0 wbytes=512 rios=0 wios=1 dbytes=0 dios=0\n";
        assert_eq!(
            parse_v2(text),
            vec![
                DeviceIo { major: 7, minor: 0, read_bytes: 0, write_bytes: 512, reads: 0, writes: 1 },
                DeviceIo { major: 254, minor: 0, read_bytes: 4096, write_bytes: 8388608, reads: 1, writes: 64 },
            ]
        );
        assert!(parse_v2("").is_empty(), "no I/O yet: no device");
    }

    #[test]
    fn parses_blkio_files() {
        let bytes = "254:0 Read 4096\n254:0 Write 8192\n254:0 Sync 8192\n254:0 Async 4096\n254:0 Discard 0\n254:0 Total 12288\nTotal 12288\n";
        let ops = "254:0 Read 1\n254:0 Write 2\n254:0 Sync 2\n254:0 Async 1\n254:0 Discard 0\n254:0 Total 3\nTotal 3\n";
        assert_eq!(
            parse_v1(bytes, ops),
            vec![DeviceIo { major: 254, minor: 0, read_bytes: 4096, write_bytes: 8192, reads: 1, writes: 2 }]
        );
        assert!(parse_v1("Total 0\n", "Total 0\n").is_empty(), "a device no request was counted for: left out");
    }

    #[test]
    fn v1_takes_the_larger_of_the_throttle_and_bfq_counts() {
        use std::fs;

        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let cgroup = CgroupDir::open(d).unwrap();
        assert_eq!(read_v1(&cgroup), None, "no blkio files");
        // Throttling set up on 8:0 only, BFQ scheduling 7:0 (and 8:0 with fewer merged requests).
        fs::write(d.join("blkio.throttle.io_service_bytes_recursive"), "8:0 Read 100\n8:0 Write 200\nTotal 300\n")
            .unwrap();
        fs::write(d.join("blkio.throttle.io_serviced_recursive"), "8:0 Read 4\n8:0 Write 6\nTotal 10\n").unwrap();
        fs::write(
            d.join("blkio.bfq.io_service_bytes_recursive"),
            "7:0 Write 512\n8:0 Read 100\n8:0 Write 200\nTotal 812\n",
        )
        .unwrap();
        fs::write(d.join("blkio.bfq.io_serviced_recursive"), "7:0 Write 1\n8:0 Read 2\n8:0 Write 3\nTotal 6\n")
            .unwrap();
        assert_eq!(
            read_v1(&cgroup).unwrap(),
            vec![
                DeviceIo { major: 7, minor: 0, read_bytes: 0, write_bytes: 512, reads: 0, writes: 1 },
                DeviceIo { major: 8, minor: 0, read_bytes: 100, write_bytes: 200, reads: 4, writes: 6 },
            ]
        );
    }
}
