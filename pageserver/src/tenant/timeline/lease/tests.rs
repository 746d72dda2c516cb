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

/// The write contract of `LeaseStore` (module comment, points 1-3), on
/// simulated time: renewals that change nothing durable write nothing, a
/// lease renewed without pause is written once per quarter length, and
/// pending changes share one write.
#[tokio::test]
async fn renewals_cost_a_bounded_number_of_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (e, length) = (engine(), 10 * MIN);
    let store = LeaseStore::new(LeaseMap::default(), length);
    let cancel = tokio_util::sync::CancellationToken::new();
    let renew = |lsn: u64, at: SystemTime| {
        store.begin(Lsn(lsn), at, || Ok::<(), TooManyLeases>(())).unwrap()
    };
    let now = t0();
    let Begun::Pending(seq) = renew(0x100, now) else { panic!("a new lease is written") };
    let first = store.make_durable(&e, dir.path(), Lsn(0x100), seq, &cancel).await.unwrap();
    assert_eq!(first, lease_until(now, length + length / WRITE_AHEAD_DIVISOR));
    assert_eq!(store.file_writes(), 1);
    // 100,000 renewals within the write-ahead: each answered at once with
    // the durable lease, which covers what it asked for.
    let step = (length / WRITE_AHEAD_DIVISOR) / 100_000;
    for i in 0..100_000u32 {
        let at = now + step * i;
        assert_eq!(renew(0x100, at), Begun::Durable(first), "renewal {i}");
        assert!(first >= lease_until(at, length));
    }
    assert_eq!(store.file_writes(), 1, "renewals that change nothing durable write nothing");
    let later = now + length / WRITE_AHEAD_DIVISOR + Duration::from_millis(1);
    let Begun::Pending(seq) = renew(0x100, later) else { panic!("past the write-ahead") };
    let second = store.make_durable(&e, dir.path(), Lsn(0x100), seq, &cancel).await.unwrap();
    assert!(second > first && second >= lease_until(later, length));
    assert_eq!(store.file_writes(), 2);

    // 100 new LSNs registered before the first writer starts: one write.
    let pending: Vec<(u64, u64)> = (1..=100)
        .map(|i| match renew(0x1000 * i, later) {
            Begun::Pending(seq) => (0x1000 * i, seq),
            other => panic!("{other:?}"),
        })
        .collect();
    for (lsn, seq) in pending {
        let lease = store.make_durable(&e, dir.path(), Lsn(lsn), seq, &cancel).await.unwrap();
        assert!(lease >= lease_until(later, length));
    }
    assert_eq!(store.file_writes(), 3, "pending changes share one write");
    let loaded = LeaseMap::load(&e, dir.path(), later).await.unwrap();
    assert_eq!(loaded.valid(later), store.valid(later));
}

/// Durability across a crash at every point of a run of renewals: every
/// lease a client was answered is in the file after the restart, with at
/// least the expiry it was answered; a failed write answers nothing, and
/// GC still protects the lease it was writing.
#[cfg(feature = "testing")]
#[tokio::test]
async fn acknowledged_leases_survive_a_crash() {
    use io_engine::sim::SimFs;
    let dir = Path::new("/tl");
    let length = 10 * MIN;
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut outcomes = (0, 0);
    for seed in 0..100u64 {
        let fs = SimFs::new(seed);
        let e = IoEngine::simulated(fs.clone());
        e.create_dir_all(dir).await.unwrap();
        e.fsync_dir(Path::new("/")).await.unwrap();
        let store = LeaseStore::new(LeaseMap::default(), length);
        fs.power_off_after(seed % 23);
        let mut acked: Vec<(Lsn, LsnLease)> = Vec::new();
        for i in 0..12u64 {
            // Three LSNs, renewed at times that sometimes pass the write-ahead.
            let (lsn, at) = (Lsn(0x100 * (1 + i % 3)), t0() + (length / 3) * (i as u32 / 3));
            let begun = store.begin(lsn, at, || Ok::<(), TooManyLeases>(())).unwrap();
            let answer = match begun {
                Begun::Durable(l) => Some(l),
                Begun::Pending(seq) => store.make_durable(&e, dir, lsn, seq, &cancel).await.ok(),
            };
            match answer {
                Some(l) => acked.push((lsn, l)),
                None => {
                    outcomes.1 += 1;
                    let protected = store.with_min_valid(at, |min| min);
                    assert!(protected.is_some_and(|m| m <= lsn), "seed {seed}: {protected:?}");
                }
            }
        }
        fs.crash();
        let loaded = LeaseMap::load(&e, dir, t0()).await.unwrap_or_else(|err| {
            panic!("seed {seed}: the lease file does not load after a crash: {err:#}")
        });
        for (lsn, l) in &acked {
            let got = loaded.get(*lsn);
            assert!(got.is_some_and(|g| g >= *l), "seed {seed}: {lsn} acked {l:?}, loaded {got:?}");
        }
        outcomes.0 += acked.len();
    }
    assert!(outcomes.0 > 0 && outcomes.1 > 0, "both outcomes are exercised: {outcomes:?}");
}
