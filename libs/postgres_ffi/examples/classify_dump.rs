//! Classify every record of a dump (the format of
//! `tests/rmgr_dump/mod.rs`) and print the native records, to compare with
//! `pg_waldump`; records that only carry images are not printed.
//!
//! `cargo run -p postgres_ffi --example classify_dump -- <dump file> <major>`

#[path = "../tests/rmgr_dump/mod.rs"]
mod rmgr_dump;

use std::process::ExitCode;

use postgres_ffi::wal::rmgr::{classify, rmgr_name, NativeRecord};
use postgres_ffi::PgMajorVersion;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, major] = &args[..] else {
        eprintln!("usage: classify_dump <dump file> <major version>");
        return ExitCode::FAILURE;
    };
    let version = match major
        .parse()
        .map_err(|e| format!("{e}"))
        .and_then(|m| PgMajorVersion::new(m).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => {
            eprintln!("major version {major}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("read {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut errors = 0;
    for line in text.lines() {
        let rec = rmgr_dump::parse_line(line);
        match classify(&rec, version) {
            Ok(NativeRecord::ImagesOnly { without_image }) if without_image.is_empty() => {}
            Ok(n) => println!("{} {} {:#04x}: {n:?}", rec.lsn, rmgr_name(rec.rmid), rec.info),
            Err(e) => {
                errors += 1;
                println!("ERROR {e}");
            }
        }
    }
    if errors > 0 {
        eprintln!("{errors} records did not classify");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
