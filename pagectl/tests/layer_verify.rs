//! `pagectl layer info|verify` on a layer file the daemon's writer made,
//! and on damaged copies of it: a flipped byte in a value, in an index
//! leaf, in the index root, in the header, and a truncated file. Each
//! damage exits 3 naming the first bad offset; a good file exits 0.

use std::path::{Path, PathBuf};
use std::process::Command;

use io_engine::{IoEngine, IoEngineKind};
use pageserver::tenant::storage_layer::layer_file::{LayerFile, LayerWriter};
use pageserver::tenant::storage_layer::LayerKind;
use pageserver::tenant::value;
use pageserver_api::key::Key;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

/// Enough entries for a two-level index (240 a leaf): three leaves and a root.
const VALUES: u32 = 600;

struct Written {
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// Offset of each value in the file.
    value_offsets: Vec<u64>,
    index_offset: u64,
    root_block: u64,
}

fn write_layer() -> Written {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let engine = IoEngine::new(IoEngineKind::StdFs).unwrap();
        let (tenant, timeline) = (TenantId([7; 16]), TimelineId([8; 16]));
        let lsns = Lsn(0x100)..Lsn(0x200);
        let mut w =
            LayerWriter::new(&engine, dir.path(), tenant, timeline, LayerKind::Delta, lsns, false)
                .await
                .unwrap();
        let mut value_offsets = Vec::new();
        for i in 0..VALUES {
            let raw = value::image(format!("page {i} ").repeat(20).as_bytes()).serialize();
            value_offsets.push(4096 + w.bytes_written());
            w.put_raw(Key::MIN.add(1000 + i).to_compact(), Lsn(0x150), &raw, true).await.unwrap();
        }
        let layer = w.finish(Key::MIN.add(1000 + VALUES)).await.unwrap();
        let (h, _) = LayerFile::read_header(&engine, &layer.path).await.unwrap();
        let (depth, _, blocks) = h.tree.unwrap();
        assert_eq!(depth, 2, "the test needs leaves and a root");
        Written {
            path: layer.path.clone(),
            value_offsets,
            index_offset: h.index_offset,
            root_block: blocks - 1,
            _dir: dir,
        }
    })
}

fn pagectl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pagectl")).args(args).output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code().unwrap(), text(out.stdout), text(out.stderr))
}

fn verify(path: &Path) -> (i32, String, String) {
    pagectl(&["layer", "verify", path.to_str().unwrap()])
}

/// A copy of the layer (same name, in a directory of its own) with `damage` done.
fn damaged(w: &Written, damage: impl FnOnce(&mut Vec<u8>)) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(w.path.file_name().unwrap());
    let mut bytes = std::fs::read(&w.path).unwrap();
    damage(&mut bytes);
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

fn assert_damage_at(res: (i32, String, String), offset: u64, what: &str) {
    let (code, _, stderr) = res;
    assert_eq!(code, 3, "exit code for damage; stderr: {stderr}");
    assert!(stderr.contains(&format!("at offset {offset}:")), "offset {offset} named: {stderr}");
    assert!(stderr.contains(what), "{what:?} in: {stderr}");
}

#[test]
fn a_good_layer_verifies_and_shows_its_info() {
    let w = write_layer();
    let (code, stdout, stderr) = verify(&w.path);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(&format!("ok: {VALUES} values")), "{stdout}");

    let (code, stdout, stderr) = pagectl(&["layer", "info", w.path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let first = Key::MIN.add(1000);
    for expected in [
        "format version  3".to_string(),
        "kind            Delta".to_string(),
        format!("tenant          {}", TenantId([7; 16])),
        format!("LSNs            {}..{}", Lsn(0x100), Lsn(0x200)),
        format!("keys            {first}..{}", Key::MIN.add(1000 + VALUES)),
        format!("entries         {VALUES} ({VALUES} distinct keys, {VALUES} will_init)"),
        "B-tree of depth 2: 3 leaves, 4 blocks".to_string(),
        format!("entry LSNs      {} ..= {}", Lsn(0x150), Lsn(0x150)),
    ] {
        assert!(stdout.contains(&expected), "{expected:?} in:\n{stdout}");
    }
}

#[test]
fn layer_info_json_states_the_same_facts() {
    let w = write_layer();
    let (code, stdout, stderr) = pagectl(&["layer", "info", "--json", w.path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    let first = Key::MIN.add(1000);
    assert_eq!(v["format_version"], 3);
    assert_eq!(v["kind"], "delta");
    assert_eq!(v["tenant_id"], TenantId([7; 16]).to_string());
    assert_eq!(v["lsn_range"]["start"], Lsn(0x100).to_string());
    assert_eq!(v["lsn_range"]["end"], Lsn(0x200).to_string());
    assert_eq!(v["key_range"]["start"], first.to_string());
    assert_eq!(v["key_range"]["end"], Key::MIN.add(1000 + VALUES).to_string());
    assert_eq!(v["entries"], VALUES);
    assert_eq!(
        (v["distinct_keys"].clone(), v["will_init"].clone()),
        (VALUES.into(), VALUES.into())
    );
    assert_eq!(v["index"]["btree"]["depth"], 2);
    assert_eq!(v["index"]["btree"]["leaves"], 3);
    assert_eq!(v["entry_lsns"]["first"], Lsn(0x150).to_string());
    let size = std::fs::metadata(&w.path).unwrap().len();
    assert_eq!(v["file_size_bytes"], size);
}

#[test]
fn a_flipped_byte_in_a_value_names_that_value() {
    let w = write_layer();
    let at = w.value_offsets[417];
    let (_d, path) = damaged(&w, |b| b[at as usize + 30] ^= 0x40);
    assert_damage_at(verify(&path), at, "checksum mismatch");
}

#[test]
fn a_flipped_byte_in_an_index_leaf_names_the_block() {
    let w = write_layer();
    let leaf1 = w.index_offset + 8192;
    let (_d, path) = damaged(&w, |b| b[leaf1 as usize + 100] ^= 1);
    assert_damage_at(verify(&path), leaf1, "index block 1");
}

#[test]
fn a_flipped_byte_in_the_index_root_names_it() {
    let w = write_layer();
    let root = w.index_offset + 8192 * w.root_block;
    let (_d, path) = damaged(&w, |b| b[root as usize + 64] ^= 1);
    assert_damage_at(verify(&path), root, "index block");
}

#[test]
fn a_damaged_header_is_offset_0() {
    let w = write_layer();
    let (_d, path) = damaged(&w, |b| b[50] ^= 1);
    assert_damage_at(verify(&path), 0, "header checksum mismatch");
    let (code, _, stderr) = pagectl(&["layer", "info", path.to_str().unwrap()]);
    assert_eq!(code, 3, "info on a damaged file: {stderr}");
}

#[test]
fn a_truncated_file_names_where_it_ends() {
    let w = write_layer();
    let len = std::fs::metadata(&w.path).unwrap().len();
    let (_d, path) = damaged(&w, |b| b.truncate(len as usize - 5000));
    assert_damage_at(verify(&path), len - 5000, "truncated");
}

#[test]
fn a_missing_file_is_an_error_not_damage() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = verify(&dir.path().join("nothing"));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("nothing"), "{stderr}");
}
