use super::*;

/// A tar of `(name, data)` files (`None`: a directory).
fn tar_of(entries: &[(&str, Option<Vec<u8>>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in entries {
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o600);
        match data {
            Some(d) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(d.len() as u64);
                b.append_data(&mut h, name, &d[..]).unwrap();
            }
            None => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                b.append_data(&mut h, name, io::empty()).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

fn file(name: &str, data: &[u8]) -> (String, Option<Vec<u8>>) {
    (name.to_string(), Some(data.to_vec()))
}

fn outer(entries: &[(String, Option<Vec<u8>>)]) -> Vec<u8> {
    let e: Vec<(&str, Option<Vec<u8>>)> =
        entries.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
    tar_of(&e)
}

fn base_tar() -> Vec<u8> {
    tar_of(&[
        ("backup_label", Some(b"START WAL LOCATION: 0/3000028\n".to_vec())),
        ("tablespace_map", Some(b"16390 /srv/ts1\n".to_vec())),
        ("base", None),
        ("base/5/16384", Some(vec![7u8; 8192])),
    ])
}

fn ts_tar() -> Vec<u8> {
    tar_of(&[("PG_15_202209061/5/16500", Some(vec![9u8; 8192]))])
}

/// The body in chunks of `chunk` bytes.
fn body(
    data: Vec<u8>,
    chunk: usize,
) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + Unpin {
    let chunks: Vec<_> = data.chunks(chunk).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    futures::stream::iter(chunks)
}

/// Every entry the importer's reader sees: (path, data), and the archives.
async fn read_all(parts: Parts) -> Result<(Vec<(String, Vec<u8>)>, Vec<String>), TarError> {
    let mut r = TarReader::new(parts);
    let mut out = Vec::new();
    while let Some(e) = r.next_entry().await? {
        let mut data = Vec::new();
        loop {
            let b = r.read_data(1000).await?;
            if b.is_empty() {
                break;
            }
            data.extend_from_slice(&b);
        }
        out.push((e.path, data));
    }
    Ok((out, r.archives().to_vec()))
}

async fn nested_error(entries: &[(String, Option<Vec<u8>>)]) -> String {
    let parts = body_parts(body(outer(entries), 777)).await.unwrap();
    match read_all(parts).await {
        Err(TarError::Malformed(m)) => m,
        other => panic!("expected a malformed tar, got {other:?}"),
    }
}

#[tokio::test]
async fn archives_stream_under_their_prefixes() {
    let entries = vec![
        (".".to_string(), None),
        file("16390.tar", &ts_tar()),
        file("backup_manifest", b"{}\n"),
        file("base.tar", &base_tar()),
        file("pg_wal.tar", &tar_of(&[("000000010000000000000003", Some(vec![1; 100]))])),
    ];
    for chunk in [100, 4096, 1 << 20] {
        let parts = body_parts(body(outer(&entries), chunk)).await.unwrap();
        let (files, archives) = read_all(parts).await.unwrap();
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "pg_tblspc/16390/PG_15_202209061/5/16500",
                "backup_label",
                "tablespace_map",
                "base",
                "base/5/16384"
            ],
            "chunks of {chunk}"
        );
        assert_eq!(files[0].1, vec![9u8; 8192]);
        assert_eq!(files[4].1, vec![7u8; 8192]);
        assert_eq!(archives, ["pg_tblspc/16390/", ""]);
    }
}

#[tokio::test]
async fn a_leading_manifest_then_an_archive_is_nested() {
    let entries = vec![file("backup_manifest", b"{}\n"), file("base.tar", &base_tar())];
    let parts = body_parts(body(outer(&entries), 300)).await.unwrap();
    let (files, archives) = read_all(parts).await.unwrap();
    assert_eq!(files.len(), 4);
    assert_eq!(archives, [""]);
}

#[tokio::test]
async fn a_plain_tar_passes_unchanged() {
    // Also one that begins with a backup_manifest (a plain-format backup).
    for first in [None, Some(file("backup_manifest", b"{}\n"))] {
        let mut entries: Vec<_> = first.into_iter().collect();
        entries.extend([
            (".".to_string(), None),
            file("backup_label", b"x\n"),
            file("base.tar", b"y"),
        ]);
        let data = outer(&entries);
        let parts = body_parts(body(data, 200)).await.unwrap();
        let (files, archives) = read_all(parts).await.unwrap();
        let want: Vec<(String, Vec<u8>)> =
            entries.iter().filter_map(|(n, d)| Some((n.clone(), d.clone()?))).collect();
        let got: Vec<_> = files.into_iter().filter(|(p, _)| p != ".").collect();
        assert_eq!(got, want);
        assert!(archives.is_empty());
    }
}

#[tokio::test]
async fn malformed_outer_tar() {
    let mut data = outer(&[file("base.tar", &base_tar()), file("16390.tar", &ts_tar())]);
    // The second outer header's checksum.
    let second = 512 + base_tar().len();
    data[second + 150] ^= 0x01;
    let parts = body_parts(body(data.clone(), 4096)).await.unwrap();
    match read_all(parts).await {
        Err(TarError::Malformed(m)) => {
            assert!(m.starts_with("the outer tar: bad tar header at offset"), "{m}");
            assert!(m.contains("after entry 'base.tar'"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    // Cut inside an archive: the outer tar is truncated.
    data.truncate(512 + 1000);
    let parts = body_parts(body(data, 4096)).await.unwrap();
    match read_all(parts).await {
        Err(TarError::Malformed(m)) => {
            assert!(m.contains("the outer tar: tar is truncated"), "{m}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn unknown_twice_empty_compressed_and_missing_base() {
    let m = nested_error(&[file("base.tar", &base_tar()), file("notes.txt", b"hi")]).await;
    assert!(m.contains("unexpected entry 'notes.txt' in the outer tar"), "{m}");
    let m = nested_error(&[file("base.tar", &base_tar()), ("sub".into(), None)]).await;
    assert!(m.contains("'sub' in the outer tar is not a regular file"), "{m}");
    let m = nested_error(&[file("16390.tar", &ts_tar()), file("16390.tar", &ts_tar())]).await;
    assert!(m.contains("'16390.tar' appears twice in the outer tar"), "{m}");
    let m = nested_error(&[file("base.tar", &base_tar()), file("16390.tar", b"")]).await;
    assert!(m.contains("'16390.tar' is empty"), "{m}");
    let m = nested_error(&[file("16390.tar", &ts_tar())]).await;
    assert!(m.contains("it has no base.tar"), "{m}");
    for name in ["base.tar.gz", "16390.tar.lz4", "pg_wal.tar.zst"] {
        let m = nested_error(&[file(name, b"\x1f\x8b")]).await;
        assert!(m.contains(&format!("'{name}' is compressed")), "{m}");
        assert!(m.contains("decompress it to"), "{m}");
    }
}

#[test]
fn outer_names() {
    assert_eq!(tablespace_oid("16390.tar"), Some(16390));
    for bad in ["016390.tar", "x.tar", ".tar", "16390.tar.gz", "99999999999.tar"] {
        assert_eq!(tablespace_oid(bad), None, "{bad}");
    }
    assert_eq!(compressed_archive("base.tar.gz"), Some("base.tar"));
    assert_eq!(compressed_archive("16390.tar.zst"), Some("16390.tar"));
    assert_eq!(compressed_archive("base.tar"), None);
    assert_eq!(compressed_archive("notes.tar.gz"), None);
}
