//! Fuzz the safetensors reader (a checkpoint's weights are untrusted): the input is written to
//! a file in memory-backed storage and opened; every tensor it lists must then hand out
//! in-bounds data of its declared size, never a panic or a read past the map.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pagoda_hf::SafetensorsFile;

fuzz_target!(|data: &[u8]| {
    let dir = std::path::Path::new("/dev/shm");
    let dir = if dir.is_dir() { dir.to_path_buf() } else { std::env::temp_dir() };
    let path = dir.join(format!("pagoda-fuzz-{}.safetensors", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(file) = SafetensorsFile::open(&path) {
        let names: Vec<String> = file.names().map(str::to_owned).collect();
        for name in names {
            if let Some(t) = file.tensor(&name) {
                let _ = std::hint::black_box(t.n_elements());
                let _ = std::hint::black_box(t.to_f32().len());
            }
        }
    }
});
