//! The macro behind the method-keyed enums (`{"method": ..., "params": ...}`).

/// Declares an enum whose variants are keyed by a JSON-RPC method name, serialized as
/// `{"method": <name>, "params": <payload>}`. A variant whose payload is an `Option` accepts
/// absent (or `null`) params and omits them when `None`, so `{}` and absent both round-trip.
macro_rules! method_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $(
                $(#[$vmeta:meta])*
                $variant:ident($payload:ty) = $method:literal
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, schemars::JsonSchema)]
        #[serde(tag = "method", content = "params")]
        #[allow(clippy::large_enum_variant)]
        pub enum $name {
            $(
                $(#[$vmeta])*
                #[serde(rename = $method)]
                $variant($payload),
            )*
        }

        impl $name {
            /// The method name.
            pub fn method(&self) -> &'static str {
                match self {
                    $( Self::$variant(_) => $method, )*
                }
            }

            /// Whether `method` names one of this enum's variants.
            pub fn knows(method: &str) -> bool {
                matches!(method, $( $method )|*)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::{Error as _, SerializeMap as _};
                let params = match self {
                    $( Self::$variant(p) => serde_json::to_value(p).map_err(S::Error::custom)?, )*
                };
                let present = !params.is_null();
                let mut map = s.serialize_map(Some(1 + usize::from(present)))?;
                map.serialize_entry("method", self.method())?;
                if present {
                    map.serialize_entry("params", &params)?;
                }
                map.end()
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                use serde::de::Error as _;
                let raw = <$crate::types::macros::MethodAndParams as serde::Deserialize>::deserialize(d)?;
                let params = raw.params.unwrap_or(serde_json::Value::Null);
                // MCP has no positional params (derived structs would read an array by
                // position); `null` is no params.
                if !(params.is_object() || params.is_null()) {
                    return Err(D::Error::custom(format_args!(
                        "invalid params for {}: \"params\" must be an object",
                        raw.method
                    )));
                }
                match raw.method.as_str() {
                    $(
                        $method => serde_json::from_value(params)
                            .map(Self::$variant)
                            .map_err(|e| D::Error::custom(format_args!("invalid params for {}: {e}", $method))),
                    )*
                    other => Err(D::Error::custom(format_args!("unknown method {other:?}"))),
                }
            }
        }
    };
}

/// The two members every method-keyed message has.
#[derive(serde::Deserialize)]
pub(crate) struct MethodAndParams {
    pub(crate) method: String,
    #[serde(default)]
    pub(crate) params: Option<serde_json::Value>,
}
