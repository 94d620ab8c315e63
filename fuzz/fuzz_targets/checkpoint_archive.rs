//! Arbitrary bytes as a checkpoint archive (a tar) given to restore: its
//! `config.dump` read without unpacking the rest, then the whole archive
//! unpacked into an empty directory, as a restore does.
//!
//! The first byte chooses how the rest is read: as it is (even), or with its
//! tar header checksums repaired first (odd).
//!
//! Checked besides "no panic": unpacking writes nothing outside the
//! directory (nothing appears beside it or above it, and neither the archive,
//! the directory's parent nor the directory above changes).

#![no_main]

use std::fs;

use libfuzzer_sys::fuzz_target;

use nidus::checkpoint::archive;
use nidus_fuzz::{fresh_dir, shaped, Outside};

/// What restore allows (`[limits]`): more than any input here.
const LIMIT: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some(bytes) = shaped(data, false) else { return };
    let run = fresh_dir("checkpoint-archive");
    let path = run.join("checkpoint.tar");
    fs::write(&path, &bytes).expect("writing the archive");
    let dest = run.join("dest");
    fs::create_dir(&dest).expect("making the destination");
    let outside = Outside::snapshot(&run, &dest);
    let dump = archive::read_config_dump(&path, LIMIT);
    nidus_fuzz::debug(|| format!("config.dump: {:?}", dump.as_ref().map(|d| &d.id)));
    if let Ok(dump) = dump {
        // What restore reads of it must be writable again (checkpointctl reads it too).
        serde_json::to_vec(&dump).expect("a config.dump is always written");
    }
    let unpacked = archive::unpack(&path, &dest, LIMIT);
    nidus_fuzz::debug(|| format!("unpack: {unpacked:?}"));
    outside.check();
    nidus_fuzz::remove_tree(&run);
});
