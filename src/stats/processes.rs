//! Open descriptors and sockets of a cgroup's processes, from
//! `/proc/<pid>/fd` (an entry per descriptor; a socket's link reads
//! `socket:[inode]`), as cAdvisor counts them for `container_file_descriptors`
//! and `container_sockets`. A process that exits meanwhile has no descriptors.

use std::fs;

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct ProcessCounts {
    pub(crate) processes: u64,
    pub(crate) file_descriptors: u64,
    pub(crate) sockets: u64,
}

/// Counts the descriptors and sockets of `pids`.
pub(crate) fn count(pids: &[i32]) -> ProcessCounts {
    let mut counts = ProcessCounts { processes: pids.len() as u64, ..Default::default() };
    for pid in pids {
        let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        for entry in entries.flatten() {
            counts.file_descriptors += 1;
            if fs::read_link(entry.path())
                .is_ok_and(|target| target.as_os_str().as_encoded_bytes().starts_with(b"socket:"))
            {
                counts.sockets += 1;
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_this_processs_descriptors_and_a_socket() {
        let me = std::process::id() as i32;
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let file = fs::File::open("/proc/self/stat").unwrap();
        let after = count(&[me]);
        assert_eq!(after.processes, 1);
        assert!(after.sockets >= 1, "{after:?}");
        assert!(after.file_descriptors >= 2);
        drop((socket, file));
        assert_eq!(count(&[i32::MAX]), ProcessCounts { processes: 1, ..Default::default() }, "a gone process");
    }
}
