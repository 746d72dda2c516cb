use std::collections::BTreeMap;
use std::path::Path;

use pageserver_api::key::Key;
use utils::lsn::Lsn;

use super::index_part::{IndexLayer, IndexLevel};
use super::*;
use crate::tenant::metadata::TimelineMetadata;

fn storage(root: &Path) -> RemoteStorage {
    crate::remote_storage::local_for_tests(root, "")
}

#[test]
fn object_names_parse_back() {
    let name = LayerName::delta(Key::MIN..Key::MAX, Lsn(1)..Lsn(9));
    let (t, tl) = (TenantId::generate(), TimelineId::generate());
    let key = layer_key(t, tl, &name.to_string(), Generation(0x1f));
    let file = key.rsplit('/').next().unwrap();
    assert!(file.ends_with("-0000001f"), "{file}");
    assert_eq!(TimelineObject::parse(file), Some(TimelineObject::Layer(name, Generation(0x1f))));
    let key = index_key(t, tl, Generation(3));
    let file = key.rsplit('/').next().unwrap();
    assert_eq!(TimelineObject::parse(file), Some(TimelineObject::Index(Generation(3))));
    assert_eq!(TimelineObject::parse("index_part.json-3"), None);
    assert_eq!(TimelineObject::parse("junk-00000001"), None);
}

#[tokio::test]
async fn claims_refuse_older_generations() {
    let dir = tempfile::tempdir().unwrap();
    let rs = storage(dir.path());
    let t = TenantId::generate();
    assert_eq!(newest_generation(&rs, t).await.unwrap(), None);
    claim_generation(&rs, t, Generation(2)).await.unwrap();
    claim_generation(&rs, t, Generation(2)).await.unwrap(); // the same again: a restart
    let e = claim_generation(&rs, t, Generation(1)).await.unwrap_err().to_string();
    assert!(e.contains("generation 1 is stale") && e.contains("generation 2"), "{e}");
    claim_generation(&rs, t, Generation(5)).await.unwrap();
    assert_eq!(newest_generation(&rs, t).await.unwrap(), Some(Generation(5)));
}

#[tokio::test]
async fn the_newest_index_at_or_below_a_generation_is_chosen() {
    let dir = tempfile::tempdir().unwrap();
    let rs = storage(dir.path());
    let (t, tl) = (TenantId::generate(), TimelineId::generate());
    assert!(download_newest_index(&rs, t, tl, Generation(9)).await.unwrap().is_none());
    for g in [1, 3, 7] {
        let mut md = TimelineMetadata::new_empty(Lsn(0x10), 16);
        md.disk_consistent_lsn = Lsn(0x10 + g as u64);
        let ip = index_part::IndexPart::new(Generation(g), &md, &BTreeMap::new(), None);
        rs.put(&index_key(t, tl, Generation(g)), ip.to_json().into()).await.unwrap();
    }
    let ip = download_newest_index(&rs, t, tl, Generation(5)).await.unwrap().unwrap();
    assert_eq!((ip.generation, ip.disk_consistent_lsn), (Generation(3), Lsn(0x13)));
    assert_eq!(list_timelines(&rs, t).await.unwrap(), vec![tl]);
    // A damaged index names its object.
    rs.put(&index_key(t, tl, Generation(7)), "{".into()).await.unwrap();
    let e = format!("{:#}", download_newest_index(&rs, t, tl, Generation(8)).await.unwrap_err());
    assert!(e.contains("index_part.json-00000007"), "{e}");
    let _ =
        IndexLayer { level: IndexLevel::L0, file_size: 0, crc32c: 0, generation: Generation(1) };
}
