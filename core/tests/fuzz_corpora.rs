//! Runs every fuzz entry point (`pelican::fuzzing`) over the committed seeds
//! (`fuzz/seeds/<target>/`), the crashes kept as regressions (`fuzz/regressions/<target>/`)
//! and every reply captured from the real servers (`tests/fixtures`). Needs the `fuzzing`
//! feature: `cargo test -p pelican --features fuzzing`.
#![cfg(feature = "fuzzing")]

use std::path::{Path, PathBuf};

use pelican::fuzzing;

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 6] = [
    ("decode", fuzzing::decode),
    ("read_reply", fuzzing::read_reply),
    ("autoclaim_reply", fuzzing::autoclaim_reply),
    ("stream_reply", fuzzing::stream_reply),
    ("consumer", consumer),
    ("many_streams", many_streams),
];

/// The many-streams target, with the clock origin it needs from outside the core.
#[allow(clippy::disallowed_methods)]
fn many_streams(data: &[u8]) {
    fuzzing::many_streams(data, std::time::Instant::now());
}

/// The consumer target, with the clock origin it needs from outside the core.
#[allow(clippy::disallowed_methods)]
fn consumer(data: &[u8]) {
    fuzzing::consumer(data, std::time::Instant::now());
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the core sits in the repository").to_path_buf()
}

/// The files directly in `dir`, sorted; none if it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> =
        entries.map(|e| e.expect("a directory entry").path()).filter(|p| p.is_file()).collect();
    out.sort();
    out
}

/// Every captured reply, with the protocol byte the entry points expect first.
fn fixtures() -> Vec<(PathBuf, u8, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out = Vec::new();
    for flavor in files_and_dirs(&root) {
        for (proto, bit) in [("resp2", 0u8), ("resp3", 1u8)] {
            for path in files(&flavor.join(proto)) {
                let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                out.push((path, bit, bytes));
            }
        }
    }
    assert!(out.len() >= 150, "the captured fixtures are missing ({} found)", out.len());
    out
}

fn files_and_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

fn run(name: &str, target: Target, path: &Path, data: &[u8]) {
    let outcome = std::panic::catch_unwind(|| target(data));
    assert!(outcome.is_ok(), "fuzz target {name} failed on {}", path.display());
}

#[test]
fn seeds_and_regressions() {
    let fuzz = repo().join("fuzz");
    for (name, target) in TARGETS {
        let seeds = files(&fuzz.join("seeds").join(name));
        assert!(!seeds.is_empty(), "no seeds for {name}: run fuzz/make-seeds");
        for path in seeds.iter().chain(&files(&fuzz.join("regressions").join(name))) {
            let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            run(name, target, path, &data);
        }
    }
}

#[test]
fn captured_replies() {
    for (path, bit, bytes) in fixtures() {
        // Every chunk size of the decoder's split for the first few, one for the rest.
        for split in [0u8, 1, 6, 63] {
            let mut data = vec![bit | split << 1];
            data.extend_from_slice(&bytes);
            run("decode", fuzzing::decode, &path, &data);
        }
        let mut data = vec![bit];
        data.extend_from_slice(&bytes);
        run("read_reply", fuzzing::read_reply, &path, &data);
        run("autoclaim_reply", fuzzing::autoclaim_reply, &path, &data);
        for chunk in [0u8, 6] {
            let mut data = vec![bit | chunk << 1];
            data.extend_from_slice(&bytes);
            run("stream_reply", fuzzing::stream_reply, &path, &data);
            data[0] |= 128; // as a claim
            run("stream_reply", fuzzing::stream_reply, &path, &data);
        }
        // A consumer that connects, writes its opening commands, gets this reply (whatever it
        // answers), then is driven: config byte, write all, feed it, drive with Ack, poll.
        let mut script = vec![bit, 7];
        for piece in bytes.chunks(255) {
            script.extend_from_slice(&[0, piece.len() as u8]);
            script.extend_from_slice(piece);
        }
        script.extend_from_slice(&[10, 9]);
        run("consumer", consumer, &path, &script);
    }
}
