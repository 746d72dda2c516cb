use super::*;

const MIN: Duration = Duration::from_secs(60);

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn engine() -> IoEngine {
    IoEngine::new(io_engine::IoEngineKind::StdFs).unwrap()
}

#[test]
fn renewing_extends_and_expired_leases_go() {
    let mut m = LeaseMap::default();
    let now = t0();
    let a = m.renew(Lsn(0x200), lease_until(now, 10 * MIN), now).unwrap();
    assert_eq!(a.valid_until_ms(), to_ms(now) + 600_000);
    // A shorter renewal does not shorten; a longer one extends.
    assert_eq!(m.renew(Lsn(0x200), lease_until(now, MIN), now).unwrap(), a);
    let later = now + 5 * MIN;
    let b = m.renew(Lsn(0x200), lease_until(later, 10 * MIN), later).unwrap();
    assert!(b > a);
    m.renew(Lsn(0x100), lease_until(now, MIN), now).unwrap();
    assert_eq!(m.min_valid_lsn(now), Some(Lsn(0x100)));
    // The lease at 0x100 expires after a minute; min moves up.
    let after = now + 2 * MIN;
    assert_eq!(m.min_valid_lsn(after), Some(Lsn(0x200)));
    assert_eq!(m.valid(after), vec![(Lsn(0x200), b)]);
    assert_eq!(m.prune(after), 1);
    assert_eq!(m.min_valid_lsn(now + 20 * MIN), None);
}

#[test]
fn leases_are_bounded() {
    let mut m = LeaseMap::default();
    let now = t0();
    for i in 0..MAX_LEASES as u64 {
        m.renew(Lsn(0x1000 + i), lease_until(now, MIN), now).unwrap();
    }
    assert_eq!(m.renew(Lsn(1), lease_until(now, MIN), now), Err(TooManyLeases));
    // Renewing a held one still works; once they expire there is room.
    m.renew(Lsn(0x1000), lease_until(now, 2 * MIN), now).unwrap();
    let later = now + MIN + Duration::from_secs(1);
    m.renew(Lsn(1), lease_until(later, MIN), later).unwrap();
    assert_eq!(m.valid(later).len(), 2);
}

#[tokio::test]
async fn persisted_leases_survive_and_expired_ones_are_dropped_on_load() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine();
    let now = t0();
    assert_eq!(LeaseMap::load(&e, dir.path(), now).await.unwrap(), LeaseMap::default());
    let mut m = LeaseMap::default();
    m.renew(Lsn(0x100), lease_until(now, MIN), now).unwrap();
    m.renew(Lsn(0x200), lease_until(now, 10 * MIN), now).unwrap();
    m.persist(&e, dir.path()).await.unwrap();
    assert_eq!(LeaseMap::load(&e, dir.path(), now).await.unwrap(), m);
    let later = now + 2 * MIN;
    let loaded = LeaseMap::load(&e, dir.path(), later).await.unwrap();
    assert_eq!(loaded.valid(later), m.valid(later));
    assert_eq!(loaded.valid(later).len(), 1, "the expired lease is not loaded");
}

#[tokio::test]
async fn a_damaged_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine();
    for (bytes, expect) in [
        (&b"{\"version\": 1, \"leases\": [{\"lsn\": 5}]}"[..], "damaged"),
        (&b"not json"[..], "damaged"),
        (&b"{\"version\": 9, \"leases\": []}"[..], "has version 9"),
    ] {
        std::fs::write(dir.path().join(LEASES_FILE), bytes).unwrap();
        let err = format!("{:#}", LeaseMap::load(&e, dir.path(), t0()).await.unwrap_err());
        assert!(err.contains(LEASES_FILE) && err.contains(expect), "{err}");
    }
}

/// Power loss at every point of a rewrite of the file: after the crash the
/// file loads, and holds either the old map or the new one; a crash after
/// the rewrite returned keeps the new one.
#[cfg(feature = "testing")]
#[tokio::test]
async fn a_crash_keeps_the_last_acknowledged_leases() {
    use io_engine::sim::SimFs;
    let now = t0();
    let dir = Path::new("/tl");
    let mut old = LeaseMap::default();
    old.renew(Lsn(0x100), lease_until(now, MIN), now).unwrap();
    let mut new = old.clone();
    new.renew(Lsn(0x200), lease_until(now, 10 * MIN), now).unwrap();
    let mut saw = (0, 0);
    for seed in 0..200u64 {
        let fs = SimFs::new(seed);
        let e = IoEngine::simulated(fs.clone());
        e.create_dir_all(dir).await.unwrap();
        e.fsync_dir(Path::new("/")).await.unwrap();
        old.persist(&e, dir).await.unwrap();
        fs.power_off_after(seed % 8);
        let acked = new.persist(&e, dir).await.is_ok();
        fs.crash();
        let got = LeaseMap::load(&e, dir, now).await.unwrap_or_else(|err| {
            panic!("seed {seed}: the lease file does not load after a crash: {err:#}")
        });
        if acked {
            assert_eq!(got, new, "seed {seed}: an acknowledged lease was lost");
        } else {
            assert!(got == old || got == new, "seed {seed}: {got:?}");
        }
        if got == new {
            saw.1 += 1;
        } else {
            saw.0 += 1;
        }
    }
    assert!(saw.0 > 0 && saw.1 > 0, "both outcomes are exercised: {saw:?}");
}
