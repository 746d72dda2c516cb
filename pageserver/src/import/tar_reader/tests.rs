//! Tests of the streaming tar reader.

use super::*;

fn stream_of(data: Vec<u8>, chunk: usize) -> impl Stream<Item = Result<Bytes, io::Error>> + Unpin {
    let chunks: Vec<Result<Bytes, io::Error>> =
        data.chunks(chunk.max(1)).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    futures::stream::iter(chunks)
}

fn build(entries: &[(&str, &[u8])], long_name: bool) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o600);
        h.set_entry_type(tar::EntryType::Regular);
        if long_name {
            b.append_data(&mut h, path, *data).unwrap();
        } else {
            h.set_path(path).unwrap();
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
    }
    let mut dir = tar::Header::new_ustar();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_size(0);
    dir.set_mode(0o700);
    dir.set_path("base/5/").unwrap();
    dir.set_cksum();
    b.append(&dir, std::io::empty()).unwrap();
    b.into_inner().unwrap()
}

async fn read_all<S, P>(r: &mut TarReader<S>) -> Result<Vec<(String, EntryKind, Vec<u8>)>, TarError>
where
    S: Stream<Item = Result<P, io::Error>> + Unpin,
    P: Into<TarPart>,
{
    let mut out = Vec::new();
    while let Some(e) = r.next_entry().await? {
        let mut data = Vec::new();
        loop {
            let d = r.read_data(1000).await?;
            if d.is_empty() {
                break;
            }
            data.extend_from_slice(&d);
        }
        assert_eq!(data.len() as u64, e.size);
        out.push((e.path, e.kind, data));
    }
    Ok(out)
}

#[tokio::test]
async fn reads_entries_across_chunk_boundaries() {
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let long = format!("pg_tblspc/16385/PG_15_202209061/{}/16390.1", "9".repeat(80));
    let tar = build(
        &[
            ("backup_label", b"START WAL LOCATION: 0/2000028\n"),
            ("base/5/16384", &big),
            (&long, b"x"),
        ],
        true,
    );
    for chunk in [1, 7, 512, 4096, 1 << 20] {
        let mut r = TarReader::new(stream_of(tar.clone(), chunk));
        let got = read_all(&mut r).await.unwrap();
        assert_eq!(got.len(), 4, "chunk {chunk}");
        assert_eq!(got[0].0, "backup_label");
        assert_eq!(got[1].2, big);
        assert_eq!(got[2].0, long, "GNU long name");
        assert_eq!(got[3].0, "base/5");
        assert_eq!(got[3].1, EntryKind::Dir);
        assert_eq!(r.offset(), tar.len() as u64, "trailer drained");
    }
}

#[tokio::test]
async fn skips_unread_data() {
    let tar = build(&[("a", &[1u8; 3000]), ("b", b"bb")], false);
    let mut r = TarReader::new(stream_of(tar, 100));
    assert_eq!(r.next_entry().await.unwrap().unwrap().path, "a");
    assert_eq!(r.read_data(10).await.unwrap().len(), 10);
    let e = r.next_entry().await.unwrap().unwrap();
    assert_eq!((e.path.as_str(), e.size), ("b", 2));
    assert_eq!(&r.read_data(100).await.unwrap()[..], b"bb");
    assert_eq!(r.next_entry().await.unwrap().unwrap().kind, EntryKind::Dir);
    assert!(r.next_entry().await.unwrap().is_none());
    assert!(r.next_entry().await.unwrap().is_none());
}

/// (path, data, ended) per file the observer was shown.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>, bool)>>>;

/// Records what it is shown: (path, data) per file, `end` checked.
struct Recorder(Seen);

impl EntryObserver for Recorder {
    fn begin(&mut self, entry: &Entry) {
        self.0.lock().unwrap().push((entry.path.clone(), Vec::new(), false));
    }
    fn data(&mut self, bytes: &[u8]) {
        let mut files = self.0.lock().unwrap();
        let last = files.last_mut().unwrap();
        assert!(!last.2, "data after end");
        last.1.extend_from_slice(bytes);
    }
    fn end(&mut self) {
        self.0.lock().unwrap().last_mut().unwrap().2 = true;
    }
}

#[tokio::test]
async fn observer_sees_read_and_skipped_data_once() {
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let entries: &[(&str, &[u8])] = &[("a", &big), ("empty", b""), ("b", &big[..700])];
    let tar = build(entries, false);
    for (chunk, read) in [(1, 0), (100, 10), (4096, 8192), (1 << 20, 1 << 20)] {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut r = TarReader::with_observer(
            stream_of(tar.clone(), chunk),
            Box::new(Recorder(seen.clone())),
        );
        // The caller reads part of "a", all of "b", nothing of "empty".
        r.next_entry().await.unwrap().unwrap();
        r.read_data(read).await.unwrap();
        r.next_entry().await.unwrap().unwrap();
        r.next_entry().await.unwrap().unwrap();
        while !r.read_data(333).await.unwrap().is_empty() {}
        assert_eq!(r.next_entry().await.unwrap().unwrap().kind, EntryKind::Dir);
        assert!(r.next_entry().await.unwrap().is_none());
        let seen = seen.lock().unwrap();
        let want: Vec<(String, Vec<u8>, bool)> =
            entries.iter().map(|(p, d)| (p.to_string(), d.to_vec(), true)).collect();
        assert_eq!(*seen, want, "chunk {chunk}, read {read}: directories are not files");
    }
}

#[tokio::test]
async fn pax_and_base256() {
    let mut tar = Vec::new();
    let path = format!("base/1/{}", "1".repeat(150));
    let pax = format!(" path={path}\n");
    let rec = format!("{}{}", pax.len() + 3, pax); // 3 digits of length
    assert_eq!(rec.len(), rec[..3].parse::<usize>().unwrap());
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(tar::EntryType::XHeader);
    h.set_size(rec.len() as u64);
    h.set_path("PaxHeader").unwrap();
    h.set_cksum();
    tar.extend_from_slice(h.as_bytes());
    tar.extend_from_slice(rec.as_bytes());
    tar.resize(tar.len().div_ceil(512) * 512, 0);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_path("short").unwrap();
    // base-256 size field
    let hb = h.as_mut_bytes();
    hb[124..136].copy_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5]);
    h.set_cksum();
    tar.extend_from_slice(h.as_bytes());
    tar.extend_from_slice(b"hello");
    tar.resize(tar.len().div_ceil(512) * 512 + 1024, 0);
    let mut r = TarReader::new(stream_of(tar, 333));
    let got = read_all(&mut r).await.unwrap();
    assert_eq!(got, vec![(path, EntryKind::File, b"hello".to_vec())]);
}

#[tokio::test]
async fn malformed_and_truncated() {
    let tar = build(&[("base/5/16384", &[7u8; 8192]), ("global/pg_control", &[1u8; 100])], false);
    // Corrupt header checksum of the second entry.
    let mut bad = tar.clone();
    bad[512 + 8192 + 10] ^= 0xff;
    let err = read_all(&mut TarReader::new(stream_of(bad, 4096))).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("offset 8704") && msg.contains("base/5/16384") && msg.contains("checksum"),
        "{msg}"
    );

    // Cut in the middle of data.
    let err = read_all(&mut TarReader::new(stream_of(tar[..512 + 5000].to_vec(), 4096)))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("truncated")
            && msg.contains("base/5/16384")
            && msg.contains("3192 bytes missing"),
        "{msg}"
    );

    // Cut exactly at an entry boundary: no end marker.
    let err = read_all(&mut TarReader::new(stream_of(tar[..512 + 8192].to_vec(), 4096)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("without the end-of-archive marker"), "{err}");

    // Not a tar at all.
    let err = read_all(&mut TarReader::new(stream_of(vec![b'x'; 2000], 4096))).await.unwrap_err();
    assert!(err.to_string().contains("not a tar archive"), "{err}");

    // Empty body.
    let err = read_all(&mut TarReader::new(stream_of(Vec::new(), 4096))).await.unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
}

fn parts(items: Vec<TarPart>) -> impl Stream<Item = Result<TarPart, io::Error>> + Unpin {
    futures::stream::iter(items.into_iter().map(Ok).collect::<Vec<_>>())
}

fn data_parts(tar: &[u8], chunk: usize) -> Vec<TarPart> {
    tar.chunks(chunk).map(|c| TarPart::Data(Bytes::copy_from_slice(c))).collect()
}

/// A tablespace's archive, then the main one (a BASE_BACKUP's order): the
/// first archive's paths get its prefix, the observer sees every file.
#[tokio::test]
async fn several_archives_with_prefixes() {
    let ts =
        build(&[("PG_16_202307071/5/16400", b"page"), ("PG_16_202307071/5/16400_vm", b"")], false);
    let main = build(&[("backup_label", b"label"), ("base/5/1259", b"cat")], false);
    for chunk in [1, 7, 512, 100_000] {
        let mut items = vec![TarPart::Archive { prefix: "pg_tblspc/16390/".into() }];
        items.extend(data_parts(&ts, chunk));
        items.push(TarPart::Archive { prefix: String::new() });
        items.extend(data_parts(&main, chunk));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut r = TarReader::with_observer(parts(items), Box::new(Recorder(seen.clone())));
        let got = read_all(&mut r).await.unwrap();
        let names: Vec<&str> = got.iter().map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(
            names,
            [
                "pg_tblspc/16390/PG_16_202307071/5/16400",
                "pg_tblspc/16390/PG_16_202307071/5/16400_vm",
                "pg_tblspc/16390/base/5",
                "backup_label",
                "base/5/1259",
                "base/5",
            ],
            "chunk {chunk}"
        );
        assert_eq!(got[0].2, b"page");
        assert_eq!(r.archives(), ["pg_tblspc/16390/", ""]);
        assert_eq!(seen.lock().unwrap().len(), 4);
        assert_eq!(r.offset(), (ts.len() + main.len()) as u64);
    }
}

/// An archive cut short before the next one begins is truncated, naming
/// the archive; a plain byte stream is one archive without a prefix.
#[tokio::test]
async fn an_archive_cut_before_the_next_is_truncated() {
    let ts = build(&[("PG_16_202307071/5/16400", &[7u8; 600])], false);
    let main = build(&[("backup_label", b"label")], false);
    let mut items = vec![TarPart::Archive { prefix: "pg_tblspc/16390/".into() }];
    items.extend(data_parts(&ts[..700], 512));
    items.push(TarPart::Archive { prefix: String::new() });
    items.extend(data_parts(&main, 512));
    let e = read_all(&mut TarReader::new(parts(items))).await.unwrap_err().to_string();
    assert!(e.starts_with("tar is truncated (the archive of pg_tblspc/16390)"), "{e}");
    assert!(e.contains("'pg_tblspc/16390/PG_16_202307071/5/16400'"), "{e}");

    let mut r = TarReader::new(stream_of(main.clone(), 100));
    assert_eq!(read_all(&mut r).await.unwrap()[0].0, "backup_label");
    assert!(r.archives().is_empty());
}
