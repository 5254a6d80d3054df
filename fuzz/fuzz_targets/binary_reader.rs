//! Fuzz the binary trace reader and the analysis behind it: any input
//! gives records or a clean error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pmlab_trace::analyze::{Analyzer, Config};
use pmlab_trace::binary;

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = binary::Reader::new(data) else {
        return;
    };
    let mut a = Analyzer::new(Config {
        window_ns: 1000,
        flushes_as_stores: true,
    });
    for r in reader {
        match r {
            Ok(rec) => a.push(&rec),
            Err(e) => {
                assert!(e.to_string().contains("offset"));
                break;
            }
        }
    }
    let _ = a.finish();
});
