//! Typed metadata getters: `Ok(None)` when the key is absent, an error naming the key and both
//! types when it has the wrong type. Integer getters take any integer type whose value fits,
//! because writers disagree on u32/i32/u64 for the same key.

use crate::metadata::{MetaArray, MetaValue};
use crate::{GgufError, GgufFile};

impl GgufFile {
    pub fn get_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.get_integer(key, "u32")
    }

    pub fn get_i32(&self, key: &str) -> Result<Option<i32>, GgufError> {
        self.get_integer(key, "i32")
    }

    pub fn get_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.get_integer(key, "u64")
    }

    pub fn get_i64(&self, key: &str) -> Result<Option<i64>, GgufError> {
        self.get_integer(key, "i64")
    }

    pub fn get_usize(&self, key: &str) -> Result<Option<usize>, GgufError> {
        self.get_integer(key, "usize")
    }

    /// An f32 or f64 value, as f32.
    pub fn get_f32(&self, key: &str) -> Result<Option<f32>, GgufError> {
        self.get_typed(key, "f32", |v| match *v {
            MetaValue::F32(x) => Some(x),
            MetaValue::F64(x) => Some(x as f32),
            _ => None,
        })
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.get_typed(key, "bool", |v| match *v {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        })
    }

    pub fn get_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.get_typed(key, "string", MetaValue::as_str)
    }

    /// Any array value.
    pub fn get_array(&self, key: &str) -> Result<Option<&MetaArray>, GgufError> {
        self.get_typed(key, "array", MetaValue::as_array)
    }

    /// An array of strings (an empty array of any element type counts as one).
    pub fn get_str_array(&self, key: &str) -> Result<Option<&[String]>, GgufError> {
        self.get_typed(key, "array of string", |v| match v {
            MetaValue::Array(MetaArray::Str(s)) => Some(s.as_slice()),
            MetaValue::Array(a) if a.is_empty() => Some(&[]),
            _ => None,
        })
    }

    /// An array of f32 (an empty array of any element type counts as one).
    pub fn get_f32_array(&self, key: &str) -> Result<Option<&[f32]>, GgufError> {
        self.get_typed(key, "array of f32", |v| match v {
            MetaValue::Array(MetaArray::F32(s)) => Some(s.as_slice()),
            MetaValue::Array(a) if a.is_empty() => Some(&[]),
            _ => None,
        })
    }

    /// An array of i32 (an empty array of any element type counts as one).
    pub fn get_i32_array(&self, key: &str) -> Result<Option<&[i32]>, GgufError> {
        self.get_typed(key, "array of i32", |v| match v {
            MetaValue::Array(MetaArray::I32(s)) => Some(s.as_slice()),
            MetaValue::Array(a) if a.is_empty() => Some(&[]),
            _ => None,
        })
    }

    /// `general.architecture`, which every GGUF model must have.
    pub fn architecture(&self) -> Result<&str, GgufError> {
        const KEY: &str = "general.architecture";
        self.get_str(KEY)?
            .ok_or_else(|| GgufError::MissingKey(KEY.to_owned()))
    }

    fn get_typed<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        convert: impl FnOnce(&'a MetaValue) -> Option<T>,
    ) -> Result<Option<T>, GgufError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        match convert(value) {
            Some(out) => Ok(Some(out)),
            None => Err(GgufError::WrongType {
                key: key.to_owned(),
                expected,
                found: value.type_name(),
            }),
        }
    }

    fn get_integer<T: TryFrom<i128>>(
        &self,
        key: &str,
        expected: &'static str,
    ) -> Result<Option<T>, GgufError> {
        let Some(wide) = self.get_typed(key, expected, MetaValue::as_integer)? else {
            return Ok(None);
        };
        T::try_from(wide)
            .map(Some)
            .map_err(|_| GgufError::OutOfRange {
                key: key.to_owned(),
                expected,
                value: wide.to_string(),
            })
    }
}
