//! The upload queue's part for the commit-time index (`commit_times.rs`
//! states the invariants): per target, the segments the target lists that
//! remote storage lacks are uploaded after its layers and before its
//! index (sealed ones from their files, the tail from the target's copy
//! in memory); the index lists exactly the target's segments; those no
//! index lists any more are deleted with the replaced layers.
//!
//! Segments are small (at most `MAX_SEGMENT_BYTES`, 320 KiB) and few per
//! target (the tail, and a sealed one every 16,384 transactions), so they
//! are uploaded one at a time and not counted in `pending_bytes`.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::client::{RemoteTimelineClient, UploadTarget};
use super::commit_times::{segment_key, IndexCommitTimes, IndexSegment};
use super::index_part::IndexPart;
use super::Generation;
use crate::metrics::remote as metrics;
use crate::tenant::commit_times::{COMMIT_TIMES_DIR, MAX_SEGMENT_BYTES};

impl RemoteTimelineClient {
    /// Upload the segments `target` lists that are not uploaded.
    pub(super) async fn upload_segments(
        &self,
        target: &UploadTarget,
        cancel: &CancellationToken,
    ) -> anyhow::Result<()> {
        let names = target.commit_times.names();
        let missing: Vec<String> = {
            let uploaded = self.uploaded_segments.lock().unwrap();
            names.into_iter().filter(|n| !uploaded.contains_key(n)).collect()
        };
        let tail = target.commit_times.tail.as_ref().map(|(r, _)| r.file_name());
        for name in missing {
            anyhow::ensure!(!cancel.is_cancelled(), "the timeline is shutting down");
            if self.superseded(target) {
                return Ok(()); // the newest target is uploaded next instead
            }
            let bytes = match &tail {
                Some(tail_name) if *tail_name == name => {
                    target.commit_times.tail_file().expect("a tail").1
                }
                _ => {
                    let path = self.dir().join(COMMIT_TIMES_DIR).join(&name);
                    match self.engine().read_file(&path, MAX_SEGMENT_BYTES).await {
                        Ok(b) => b,
                        // GC removed it since: the newer target does not list it.
                        Err(_) if self.superseded(target) => return Ok(()),
                        Err(e) => {
                            return Err(e).with_context(|| {
                                format!("read commit-time segment {} to upload it", path.display())
                            })
                        }
                    }
                }
            };
            self.upload_segment(&name, bytes).await?;
        }
        Ok(())
    }

    async fn upload_segment(&self, name: &str, bytes: Vec<u8>) -> anyhow::Result<()> {
        let started = Instant::now();
        let key = segment_key(self.tenant_id, self.timeline_id, name, self.generation);
        let segment = IndexSegment {
            file_size: bytes.len() as u64,
            crc32c: crc32c::crc32c(&bytes),
            generation: self.generation,
        };
        self.storage().put(&key, bytes.into()).await?;
        metrics::record_upload("commit_times", segment.file_size, started.elapsed());
        self.uploaded_segments.lock().unwrap().insert(name.to_string(), segment);
        Ok(())
    }

    /// The `commit_times` field of `target`'s index (panics if a segment
    /// is not uploaded: the caller uploads first).
    pub(super) fn index_commit_times(&self, target: &UploadTarget) -> IndexCommitTimes {
        let uploaded = self.uploaded_segments.lock().unwrap();
        let segments = target.commit_times.names().into_iter().map(|name| {
            let s = *uploaded
                .get(&name)
                .unwrap_or_else(|| panic!("commit-time segment {name} not uploaded"));
            assert!(s.generation <= self.generation, "segment {name} of a newer generation");
            (name, s)
        });
        IndexCommitTimes::new(segments.collect::<BTreeMap<_, _>>())
    }

    /// Forget (and return, to be deleted) the uploaded segments `index`
    /// does not list.
    pub(super) fn unlisted_segments(&self, index: &IndexPart) -> Vec<(String, Generation)> {
        let listed = index.commit_times.as_ref().map(|ct| &ct.segments);
        let mut uploaded = self.uploaded_segments.lock().unwrap();
        let gone: Vec<String> = uploaded
            .keys()
            .filter(|n| !listed.is_some_and(|l| l.contains_key(*n)))
            .cloned()
            .collect();
        gone.into_iter()
            .map(|n| (n.clone(), uploaded.remove(&n).expect("listed").generation))
            .collect()
    }

    /// Of `index`'s segments, forget those whose objects are `missing`, so
    /// that the next target uploads them again (from local disk, or the
    /// tail from memory; one no longer there makes that upload fail,
    /// naming it, and `remote_consistent_lsn` stays).
    pub(super) fn forget_missing_segments(&self, index: &IndexPart, missing: &[String]) {
        let Some(ct) = &index.commit_times else { return };
        let mut uploaded = self.uploaded_segments.lock().unwrap();
        for (name, s) in &ct.segments {
            let key = segment_key(self.tenant_id, self.timeline_id, name, s.generation);
            if missing.contains(&key) && uploaded.get(name).is_some_and(|u| u == s) {
                uploaded.remove(name);
            }
        }
    }
}
