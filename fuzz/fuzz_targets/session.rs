//! A `polycorn_proto::Session` (proxy role, or relay with the input's first bit) driven as the
//! engine drives it while a hostile peer sends it frames, reconnects, stops reading and lets
//! time pass. Input format and checks: `polycorn_fuzz::session` (docs/src/lab/fuzzing.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use polycorn_fuzz::alloc::Counting;

#[global_allocator]
static ALLOC: Counting = Counting;

fuzz_target!(|data: &[u8]| polycorn_fuzz::session::run(data));
