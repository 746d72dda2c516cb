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

#[tokio::test]
async fn missing_objects_are_named_and_a_lost_claim_is_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let rs = storage(dir.path());
    let (t, tl) = (TenantId::generate(), TimelineId::generate());
    let name = LayerName::delta(Key::MIN..Key::MAX, Lsn(0x11)..Lsn(0x20)).to_string();
    let mut md = TimelineMetadata::new_empty(Lsn(0x10), 16);
    md.disk_consistent_lsn = Lsn(0x1f);
    md.layers.push(crate::tenant::metadata::LayerEntry {
        name: name.clone(),
        size_bytes: 4,
        level: crate::tenant::storage_layer::LayerLevel::L0,
    });
    let layer =
        IndexLayer { level: IndexLevel::L0, file_size: 4, crc32c: 0, generation: Generation(1) };
    let ip = index_part::IndexPart::new(Generation(2), &md, &[(name.clone(), layer)].into(), None);
    let (ikey, lkey) = (index_key(t, tl, Generation(2)), layer_key(t, tl, &name, Generation(1)));
    let (sized, at_download) = (SizeCheck::Missing, SizeCheck::AtDownload);
    let missing = check_index_objects(&rs, t, tl, &ip, sized).await.unwrap();
    assert_eq!(missing, vec![ikey.clone(), lkey.clone()]);
    rs.put(&ikey, ip.to_json().into()).await.unwrap();
    rs.put(&lkey, "abc".into()).await.unwrap(); // another size: missing to the uploader
    assert_eq!(check_index_objects(&rs, t, tl, &ip, sized).await.unwrap(), vec![lkey.clone()]);
    assert!(check_index_objects(&rs, t, tl, &ip, at_download).await.unwrap().is_empty());
    rs.put(&lkey, "abcd".into()).await.unwrap();
    assert!(check_index_objects(&rs, t, tl, &ip, sized).await.unwrap().is_empty());

    assert!(restore_claim(&rs, t, Generation(2)).await.unwrap(), "no claim: written");
    assert!(!restore_claim(&rs, t, Generation(2)).await.unwrap(), "there: left alone");
    assert_eq!(newest_generation(&rs, t).await.unwrap(), Some(Generation(2)));
    claim_generation(&rs, t, Generation(3)).await.unwrap();
    assert!(matches!(restore_claim(&rs, t, Generation(1)).await, Err(ClaimError::Stale { .. })));
    let many: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    assert!(name_objects(&many).ends_with("k9 and 2 more"), "{}", name_objects(&many));
}
