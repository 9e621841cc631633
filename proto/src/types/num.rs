//! Serialization of JSON numbers the way the TypeScript reference does: whole floats go out
//! as integers (`50`, not `50.0`), so re-serialized messages equal their sources.

use serde::Serializer;

/// The largest magnitude below which every whole `f64` is exactly an `i64`.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// Serializes an `f64`, writing whole values as integers.
pub(crate) fn f64<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < EXACT {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// Serializes an `Option<f64>`, writing whole values as integers.
pub(crate) fn opt_f64<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(x) => f64(x, s),
        None => s.serialize_none(),
    }
}
