//! Fuzz `GgufFile::from_bytes`: any input must give `Ok` or `Err`, never a panic, and an `Ok`
//! file must hand out in-bounds tensor data and answer every getter on every key.

#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use pagoda_gguf::GgufFile;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let file_len = file.file_len();
    for t in file.tensors() {
        let bytes = file.tensor_data(t);
        assert_eq!(bytes.len(), t.size, "{}", t.name);
        assert!(t.offset + t.size as u64 <= file_len);
        assert_eq!(t.offset % file.alignment() as u64, 0);
        assert!(t.n_elements() > 0);
        black_box(bytes.iter().fold(0u8, |acc, &b| acc ^ b));
        assert!(file.tensor(&t.name).is_some());
    }
    for (key, value) in file.metadata() {
        assert!(file.get(key).is_some());
        black_box(value.type_name());
        let _ = black_box(file.get_u32(key));
        let _ = black_box(file.get_i32(key));
        let _ = black_box(file.get_u64(key));
        let _ = black_box(file.get_i64(key));
        let _ = black_box(file.get_usize(key));
        let _ = black_box(file.get_f32(key));
        let _ = black_box(file.get_bool(key));
        let _ = black_box(file.get_str(key));
        let _ = black_box(file.get_array(key));
        let _ = black_box(file.get_str_array(key));
        let _ = black_box(file.get_f32_array(key));
        let _ = black_box(file.get_i32_array(key));
    }
    let _ = black_box(file.architecture());
    black_box((file.version(), file.data_offset()));
});
