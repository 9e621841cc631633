//! Seeded mutation of JSON-RPC messages, for the tests that throw thousands of malformed
//! requests at a server and check that each is answered once and the server stays up. The
//! generator is deterministic: a failing seed replays the same messages.

use serde_json::{json, Value};

/// A small deterministic generator (xorshift64*): a mutation run replays the same messages
/// on every run, so a failure names a seed that reproduces it. The seed must not be zero.
pub struct Xorshift(pub u64);

impl Xorshift {
    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number below `n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.bits() % n as u64) as usize
    }
    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.bits() % 100 < percent
    }
}

/// Values no request expects where a mutation puts them: wrong types, extremes, control
/// and non-ASCII text, nesting, path tricks.
fn odd_value(rng: &mut Xorshift) -> Value {
    let odd = [
        json!(null),
        json!(true),
        json!(0),
        json!(-1),
        json!(u64::MAX),
        json!(1.5),
        json!(-1e308),
        json!(""),
        json!("x".repeat(300)),
        json!("\u{0}"),
        json!("é€😀"),
        json!([]),
        json!({}),
        json!([[[{}]]]),
        json!({"a":{"b":[1,{"c":null}]}}),
        json!("../../etc/passwd"),
        json!("demo://%00"),
    ];
    odd[rng.below(odd.len())].clone()
}

/// `v` with members dropped, replaced by odd values, or added (`_meta`, `id`, `cursor`, ...),
/// at any depth.
pub fn mutate(v: &Value, rng: &mut Xorshift) -> Value {
    match v {
        Value::Object(map) => {
            let mut map = map.clone();
            if !map.is_empty() && rng.chance(30) {
                if let Some(key) = map.keys().nth(rng.below(map.len())).cloned() {
                    if rng.chance(50) {
                        map.remove(&key);
                    } else {
                        map.insert(key, odd_value(rng));
                    }
                }
            }
            if rng.chance(20) {
                let keys = [
                    "_meta",
                    "id",
                    "method",
                    "params",
                    "progressToken",
                    "task",
                    "cursor",
                ];
                map.insert(keys[rng.below(keys.len())].to_owned(), odd_value(rng));
            }
            let mut out = serde_json::Map::new();
            for (k, v) in map {
                let v = if rng.chance(30) { mutate(&v, rng) } else { v };
                out.insert(k, v);
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let mut items: Vec<Value> = items.iter().map(|x| mutate(x, rng)).collect();
            if rng.chance(20) {
                items.push(odd_value(rng));
            }
            Value::Array(items)
        }
        _ if rng.chance(15) => odd_value(rng),
        scalar => scalar.clone(),
    }
}
