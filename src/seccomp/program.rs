//! A compiled profile: the classic-BPF filters to install, in order, with
//! their seccomp(2) flags, and the file the daemon writes beside a
//! container's `config.json` for its init and exec helper to load
//! (`NIDUSBPF`, version, then per filter: flags, length, instructions;
//! little-endian).

use serde::Serialize;

use crate::linux::seccomp::PreparedFilters;

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instruction {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// One filter: installed with one seccomp(2) call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// `SECCOMP_FILTER_FLAG_*` bits.
    pub(crate) flags: u32,
    pub instructions: Vec<Instruction>,
}

/// What a profile compiles to: the filters to install, first to last (the
/// kernel runs them all; see `compile`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledProfile {
    pub filters: Vec<Filter>,
    /// sha256 of the resolved profile it was compiled from.
    pub(crate) sha256: String,
    /// Syscall names the profile lists that this architecture does not have.
    pub(crate) skipped_names: Vec<String>,
}

/// A summary for status output.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProgramSummary {
    pub(crate) sha256: String,
    pub(crate) filters: usize,
    pub(crate) instructions: usize,
    pub(crate) skipped_syscalls: Vec<String>,
}

impl CompiledProfile {
    pub(crate) fn summary(&self) -> ProgramSummary {
        ProgramSummary {
            sha256: self.sha256.clone(),
            filters: self.filters.len(),
            instructions: self.filters.iter().map(|f| f.instructions.len()).sum(),
            skipped_syscalls: self.skipped_names.clone(),
        }
    }
}

/// The compiled program's file, beside the container's `config.json`.
pub(crate) const FILE_NAME: &str = "seccomp.bpf";

const MAGIC: &[u8; 8] = b"NIDUSBPF";
const VERSION: u32 = 1;
/// The kernel's BPF_MAXINSNS.
pub(crate) const MAX_INSTRUCTIONS: usize = 4096;
const MAX_FILTERS: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid seccomp program file: {0}")]
pub struct ProgramFileError(String);

/// The file form of a list of filters.
pub fn encode(filters: &[Filter]) -> Vec<u8> {
    let size: usize = filters.iter().map(|f| 8 + 8 * f.instructions.len()).sum();
    let mut out = Vec::with_capacity(16 + size);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(filters.len() as u32).to_le_bytes());
    for filter in filters {
        out.extend_from_slice(&filter.flags.to_le_bytes());
        out.extend_from_slice(&(filter.instructions.len() as u32).to_le_bytes());
        for i in &filter.instructions {
            out.extend_from_slice(&i.code.to_le_bytes());
            out.push(i.jt);
            out.push(i.jf);
            out.extend_from_slice(&i.k.to_le_bytes());
        }
    }
    out
}

/// Reads the file form back, checking every length.
pub fn decode(bytes: &[u8]) -> Result<Vec<Filter>, ProgramFileError> {
    let bad = |why: &str| ProgramFileError(why.to_string());
    let mut rest = bytes.strip_prefix(MAGIC.as_slice()).ok_or_else(|| bad("no NIDUSBPF header"))?;
    let u32_at = |rest: &mut &[u8]| -> Result<u32, ProgramFileError> {
        let (head, tail) = rest.split_first_chunk::<4>().ok_or_else(|| bad("truncated"))?;
        *rest = tail;
        Ok(u32::from_le_bytes(*head))
    };
    if u32_at(&mut rest)? != VERSION {
        return Err(bad("unknown version"));
    }
    let count = u32_at(&mut rest)? as usize;
    if count > MAX_FILTERS {
        return Err(bad("too many filters"));
    }
    let mut filters = Vec::with_capacity(count);
    for _ in 0..count {
        let flags = u32_at(&mut rest)?;
        let len = u32_at(&mut rest)? as usize;
        if len == 0 || len > MAX_INSTRUCTIONS {
            return Err(bad("a filter has no or too many instructions"));
        }
        let (body, tail) = rest.split_at_checked(len * 8).ok_or_else(|| bad("truncated"))?;
        rest = tail;
        let instructions = body
            .chunks_exact(8)
            .map(|c| Instruction {
                code: u16::from_le_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        filters.push(Filter { flags, instructions });
    }
    if !rest.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(filters)
}

/// The filters as the kernel takes them, ready to install (`linux::seccomp`).
pub(crate) fn prepare(filters: &[Filter]) -> PreparedFilters {
    let filters = filters
        .iter()
        .map(|f| {
            let program =
                f.instructions.iter().map(|i| libc::sock_filter { code: i.code, jt: i.jt, jf: i.jf, k: i.k }).collect();
            (f.flags, program)
        })
        .collect();
    PreparedFilters::new(filters)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_form_round_trips_and_refuses_damage() {
        let filters = vec![
            Filter { flags: 0, instructions: vec![Instruction { code: 0x06, jt: 0, jf: 0, k: 0x7fff_0000 }] },
            Filter {
                flags: 4,
                instructions: vec![
                    Instruction { code: 0x20, jt: 0, jf: 0, k: 4 },
                    Instruction { code: 0x15, jt: 1, jf: 0, k: 0xc000_003e },
                    Instruction { code: 0x06, jt: 0, jf: 0, k: 0x8000_0000 },
                ],
            },
        ];
        let bytes = encode(&filters);
        assert_eq!(decode(&bytes).unwrap(), filters);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&[bytes.as_slice(), b"x"].concat()).is_err());
        assert!(decode(b"NIDUSBPX").is_err());
        let mut wrong_version = bytes.clone();
        wrong_version[8] = 9;
        assert!(decode(&wrong_version).is_err());
    }
}
