//! Image metadata as an import reads it: index.json, manifests, image
//! indexes, configs and docker-archive manifest.json, through
//! `ImageStore::import` into a fresh store (tmpfs); image references and
//! digests; and an image's /etc/passwd and /etc/group as a container's user
//! is resolved from them.
//!
//! The first byte chooses. For an archive (first byte < 0xc0) its bits say
//! docker-archive or OCI layout (bit 0), tarball or directory (bit 1), a
//! name given to the import (bit 2), and an `oci-layout` file (bit 3). The
//! rest is files separated by `\n==\n`: the first is index.json (or
//! manifest.json), file N (1 to 9) is stored as `blobs/sha256/<its digest>`
//! and as `N`; a file starting `->` is a symlink to the rest of it (in a
//! tarball). So that a fuzzer can make descriptors that match, `@@N` in a
//! file becomes the hex digest of file N and `##N` its size, for N after the
//! file itself.
//!
//! Checked besides "no panic": an import writes nothing outside the store
//! root; after one, every tag and digest reference of every image names
//! that image. A reference that parses reads back from its normal form as
//! the same reference.

#![no_main]

use std::fs;

use libfuzzer_sys::fuzz_target;

use nidus::container::user::{self, UserRequest};
use nidus::image::{Digest, ImageStore, Reference};
use nidus_fuzz::{fresh_dir, Outside};

const SEPARATOR: &[u8] = b"\n==\n";
const MAX_FILES: usize = 10;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else { return };
    match kind {
        0x00..=0xbf => archive(kind, rest),
        0xc0..=0xdf => reference(rest),
        _ => passwd(rest),
    }
});

fn split(data: &[u8]) -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    let mut rest = data;
    while files.len() + 1 < MAX_FILES {
        match rest.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
            Some(at) => {
                files.push(rest[..at].to_vec());
                rest = &rest[at + SEPARATOR.len()..];
            }
            None => break,
        }
    }
    files.push(rest.to_vec());
    files
}

/// Replaces `@@N` and `##N` (N later than the file) from the last file back.
fn fill_in(files: &mut [Vec<u8>]) -> Vec<Digest> {
    let mut digests: Vec<Option<Digest>> = vec![None; files.len()];
    for i in (0..files.len()).rev() {
        let mut out = Vec::with_capacity(files[i].len());
        let text = &files[i];
        let mut at = 0;
        while at < text.len() {
            let marker = text.get(at..at + 3);
            let n = marker.map(|m| usize::from(m[2].wrapping_sub(b'0')));
            match (marker, n) {
                (Some([b'@', b'@', _]), Some(n)) if n > i && n < files.len() => {
                    out.extend_from_slice(digests[n].as_ref().expect("a later file's digest").hex().as_bytes());
                    at += 3;
                }
                (Some([b'#', b'#', _]), Some(n)) if n > i && n < files.len() => {
                    out.extend_from_slice(files[n].len().to_string().as_bytes());
                    at += 3;
                }
                _ => {
                    out.push(text[at]);
                    at += 1;
                }
            }
        }
        files[i] = out;
        digests[i] = Some(Digest::of(&files[i]));
    }
    digests.into_iter().map(|d| d.expect("every file's digest")).collect()
}

fn archive(flags: u8, rest: &[u8]) {
    let docker = flags & 1 != 0;
    let tarball = flags & 2 != 0;
    let name = (flags & 4 != 0).then_some("fuzz.example/image:tag");
    let layout_file = flags & 8 != 0;
    let mut files = split(rest);
    let digests = fill_in(&mut files);
    let first = if docker { "manifest.json" } else { "index.json" };
    let mut entries: Vec<(String, &[u8])> = vec![(first.to_string(), &files[0][..])];
    if layout_file {
        entries.push(("oci-layout".to_string(), br#"{"imageLayoutVersion":"1.0.0"}"#));
    }
    for (n, file) in files.iter().enumerate().skip(1) {
        entries.push((format!("blobs/sha256/{}", digests[n].hex()), &file[..]));
        entries.push((n.to_string(), &file[..]));
    }

    let run = fresh_dir("image-metadata");
    let root = run.join("root");
    let source = run.join(if tarball { "archive.tar" } else { "archive" });
    fs::create_dir(&root).expect("making the store root");
    if tarball {
        fs::write(&source, tarball_of(&entries)).expect("writing the tarball");
    } else {
        for (path, content) in &entries {
            let path = source.join(path);
            fs::create_dir_all(path.parent().expect("a parent")).expect("making the layout");
            fs::write(&path, content).expect("writing the layout");
        }
    }
    let outside = Outside::snapshot(&run, &root);
    let store = ImageStore::open(&root).expect("a fresh store opens");
    let imported = store.import(&source, name);
    nidus_fuzz::debug(|| format!("import: {imported:?}"));
    if imported.is_ok() {
        let images = store.list().expect("the index reads back");
        for image in &images {
            assert_eq!(store.resolve(&image.id).expect("an image's id names it").id, image.id);
            for name in image.repo_tags.iter().chain(&image.repo_digests) {
                let found = store.resolve(name).unwrap_or_else(|e| panic!("{name} of {} names nothing: {e}", image.id));
                assert_eq!(found.id, image.id, "{name} names another image");
            }
            let _ = store.manifest_annotations(image);
            let _ = store.verbose_info(image);
        }
    }
    drop(store);
    outside.check();
    let names = nidus_fuzz::names(&root);
    assert!(names.iter().all(|n| n == "images"), "the store wrote beside images/: {names:?}");
    nidus_fuzz::remove_tree(&run);
}

/// The entries as a tarball: a file starting `->` becomes a symlink.
fn tarball_of(entries: &[(String, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content) in entries {
        let mut header = tar::Header::new_ustar();
        header.set_mode(0o644);
        match content.strip_prefix(b"->") {
            Some(target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                let target = String::from_utf8_lossy(target).into_owned();
                if builder.append_link(&mut header, path, target.as_str()).is_err() {
                    continue;
                }
            }
            None => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(content.len() as u64);
                builder.append_data(&mut header, path, *content).expect("appending to memory");
            }
        }
    }
    builder.into_inner().expect("a tarball in memory")
}

fn reference(rest: &[u8]) {
    let Ok(text) = std::str::from_utf8(rest) else { return };
    if let Ok(digest) = text.parse::<Digest>() {
        assert_eq!(digest.to_string().parse::<Digest>().expect("a digest reads back"), digest);
    }
    let parsed = Reference::parse(text);
    nidus_fuzz::debug(|| format!("reference {text:?}: {parsed:?}"));
    let Ok(parsed) = parsed else { return };
    let normal = parsed.to_string();
    let again = Reference::parse(&normal).unwrap_or_else(|e| panic!("the normal form {normal:?} of {text:?}: {e}"));
    assert_eq!(again, parsed, "{text:?} and its normal form {normal:?} differ");
    if let Some(tagged) = parsed.tagged() {
        let t = Reference::parse(&tagged).unwrap_or_else(|e| panic!("tagged form {tagged:?} of {text:?}: {e}"));
        assert_eq!((t.repository(), t.tag), (parsed.repository(), parsed.tag.clone()));
    }
    if let Some(digested) = parsed.digested() {
        let d = Reference::parse(&digested).unwrap_or_else(|e| panic!("digest form {digested:?} of {text:?}: {e}"));
        assert_eq!((d.repository(), d.digest), (parsed.repository(), parsed.digest.clone()));
    }
}

/// First line: the image's User; the rest: both /etc/passwd and /etc/group.
fn passwd(rest: &[u8]) {
    let text = String::from_utf8_lossy(rest);
    let (image_user, files) = text.split_once('\n').unwrap_or((&text, ""));
    let users = user::parse_passwd(files);
    let groups = user::parse_group(files);
    let request = UserRequest { image_user: image_user.to_string(), ..Default::default() };
    let resolved = user::resolve(&request, &users, &groups);
    nidus_fuzz::debug(|| format!("user {image_user:?}: {resolved:?}"));
    let by_name = UserRequest {
        run_as_username: image_user.split(':').next().unwrap_or_default().to_string(),
        supplemental_groups: vec![0, 1000],
        ..Default::default()
    };
    let _ = user::resolve(&by_name, &users, &groups);
}
