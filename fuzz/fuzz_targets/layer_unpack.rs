//! Arbitrary bytes as an image layer (a tar, plain or gzip/zstd compressed)
//! unpacked by nidus's layer unpacker into an empty directory, as an import
//! unpacks every layer.
//!
//! The first byte chooses how the rest is read: as it is (0), or as a tar
//! whose header checksums are repaired first (so mutated headers get past
//! the tar reader), plain (1), gzip (2) or zstd (3) compressed.
//!
//! Checked besides "no panic": the unpacker writes nothing outside the
//! directory (nothing appears beside it or above it, and neither its parent
//! nor the directory above changes owner, mode or times).

#![no_main]

use std::fs;

use libfuzzer_sys::fuzz_target;

use nidus::image::unpack;
use nidus_fuzz::{fresh_dir, shaped, Outside};

fuzz_target!(|data: &[u8]| {
    let Some(layer) = shaped(data, true) else { return };
    let run = fresh_dir("layer-unpack");
    let root = run.join("root");
    fs::create_dir(&root).expect("making the layer directory");
    let outside = Outside::snapshot(&run, &root);
    let unpacked = unpack::unpack(&layer[..], &root);
    nidus_fuzz::debug(|| format!("unpack: {unpacked:?}"));
    outside.check();
    nidus_fuzz::remove_tree(&run);
});
