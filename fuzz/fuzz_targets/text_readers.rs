//! Fuzz the text and WHISPER readers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pmlab_trace::{text, whisper};

fuzz_target!(|data: &[u8]| {
    for r in text::Reader::new(data) {
        if r.is_err() {
            break;
        }
    }
    for r in whisper::Reader::new(data) {
        if r.is_err() {
            break;
        }
    }
});
