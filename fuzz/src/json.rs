//! JSON helpers the targets' reference readings share.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserializer as _, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The top-level fields of `data` with every occurrence of each name, or `None` if `data`
/// is not exactly one JSON object.
pub(crate) fn top_level_fields(data: &[u8]) -> Option<BTreeMap<String, Vec<&RawValue>>> {
    struct Fields;
    impl<'de> Visitor<'de> for Fields {
        type Value = BTreeMap<String, Vec<&'de RawValue>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out: Self::Value = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                out.entry(key).or_default().push(map.next_value()?);
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(data);
    let fields = de.deserialize_map(Fields).ok()?;
    de.end().ok()?;
    Some(fields)
}

/// The deepest bracket nesting of a JSON text, outside strings.
pub(crate) fn nesting(json: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for b in json.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Whether serde_json refused a value for a reason a skipping reader does not check.
pub(crate) fn skipped_unchecked(e: &serde_json::Error) -> bool {
    let message = e.to_string();
    [
        // `\udfbc`, `\udbee` then no `\u`, `\ud800\u0041`: surrogate pairing, which a
        // skipped string is not checked for.
        "surrogate",
        "unexpected end of hex escape",
        "invalid unicode code point",
        "number out of range",
    ]
    .iter()
    .any(|class| message.contains(class))
}
