//! The `pod-template-hash`: a short, stable name suffix and label value for a pod template.
//!
//! Shape (as upstream's `controller.ComputeHash`): FNV-1a 32-bit over a serialization of the
//! template, then — when the Deployment's `status.collisionCount` is set — over that count as 8
//! bytes (little-endian `u32`, zero-padded); the `u32` is written in decimal and each digit mapped
//! through apimachinery's `SafeEncodeString` alphabet (`bcdfghjklmnpqrstvwxz2456789`, character
//! code modulo 27), so hashes look like upstream's (`7d9c7c6f56`) and never spell words.
//!
//! The serialization differs from Go's (a `spew` dump of Go structs, not reproducible here), so
//! our values differ from kube-controller-manager's for the same template. That is harmless: the
//! controller recognises its ReplicaSets by template equality, never by hash. What matters is that
//! one template always gets one hash, across restarts and releases. The serialization is canonical
//! JSON:
//!
//! * the template goes through k8s-openapi's `Serialize` to a `serde_json::Value` — unset
//!   (`None`) fields are omitted, so new optional fields in later API versions leave existing
//!   templates' hashes alone;
//! * it is then written by [`canonical_json`] with object keys sorted bytewise and no whitespace,
//!   independently of k8s-openapi's field order and of serde_json's `preserve_order` feature.
//!
//! `golden_hashes` below pins exact values: a change to any of this fails the build.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

/// apimachinery's `rand` alphabet (no vowels, no `0`, `1`, `3`: no words, no look-alikes).
pub const SAFE_ALPHABET: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";

const FNV32_OFFSET: u32 = 0x811c_9dc5;
const FNV32_PRIME: u32 = 0x0100_0193;

/// FNV-1a, 32-bit, as Go's `hash/fnv.New32a`.
#[derive(Clone, Copy, Debug)]
struct Fnv32a(u32);

impl Fnv32a {
    fn new() -> Self {
        Fnv32a(FNV32_OFFSET)
    }
    fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u32::from(b);
            self.0 = self.0.wrapping_mul(FNV32_PRIME);
        }
    }
}

/// `rand.SafeEncodeString`: maps every character of `s` into [`SAFE_ALPHABET`] by its code.
pub fn safe_encode_string(s: &str) -> String {
    s.chars()
        .map(|c| char::from(SAFE_ALPHABET[c as usize % SAFE_ALPHABET.len()]))
        .collect()
}

impl std::io::Write for Fnv32a {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.update(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `ComputeHash`: the pod-template-hash of `template`, perturbed by `collision_count` (the
/// Deployment's `status.collisionCount`) when set, so that a name clash can be escaped.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut hasher = Fnv32a::new();
    // The canonical JSON streams into the hash: no text is built. Writing to the hasher
    // cannot fail.
    let _ = write_canonical(&template_value(template), &mut hasher);
    if let Some(count) = collision_count {
        let mut bytes = [0_u8; 8];
        bytes[..4].copy_from_slice(&(count as u32).to_le_bytes());
        hasher.update(&bytes);
    }
    safe_encode_string(&hasher.0.to_string())
}

/// The canonical JSON of a pod template: sorted keys, no whitespace, unset fields omitted.
pub fn canonical_json(template: &PodTemplateSpec) -> String {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail, and serde_json writes UTF-8 only.
    let _ = write_canonical(&template_value(template), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The template as a JSON value tree.
fn template_value(template: &PodTemplateSpec) -> Value {
    // Serializing k8s-openapi types to a Value cannot fail: no non-string map keys, no
    // non-finite floats.
    serde_json::to_value(template).unwrap_or(Value::Null)
}

/// Writes `value` with object keys sorted bytewise and no whitespace; strings and numbers
/// exactly as serde_json writes them.
fn write_canonical(value: &Value, out: &mut impl std::io::Write) -> std::io::Result<()> {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.write_all(b"{")?;
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut *out, k)?;
                out.write_all(b":")?;
                write_canonical(v, out)?;
            }
            out.write_all(b"}")
        }
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(v, out)?;
            }
            out.write_all(b"]")
        }
        scalar => Ok(serde_json::to_writer(&mut *out, scalar)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// hash_test.go's template, with `@@VERSION@@` in the image tag.
    const POD_SPEC: &str = r#"
{
    "metadata": {
        "labels": {
            "app": "cats"
        }
    },
    "spec": {
        "containers": [
            {
                "name": "cats",
                "image": "registry/test/cats:v0.@@VERSION@@.0",
                "ports": [
                    {
                        "name": "http",
                        "containerPort": 9077,
                        "protocol": "TCP"
                    }
                ],
                "env": [
                    {
                        "name": "DEPLOYMENT_ENVIRONMENT",
                        "value": "cats-stubbed-functional"
                    },
                    {
                        "name": "APP_NAME",
                        "value": "cats"
                    }
                ],
                "resources": {
                    "limits": {
                        "cpu": "1",
                        "memory": "1Gi"
                    },
                    "requests": {
                        "cpu": "1",
                        "memory": "1Gi"
                    }
                },
                "livenessProbe": {
                    "httpGet": {
                        "path": "/private/status",
                        "port": 9077,
                        "scheme": "HTTP"
                    },
                    "initialDelaySeconds": 30,
                    "timeoutSeconds": 1,
                    "periodSeconds": 10,
                    "successThreshold": 1,
                    "failureThreshold": 3
                },
                "readinessProbe": {
                    "httpGet": {
                        "path": "/private/status",
                        "port": 9077,
                        "scheme": "HTTP"
                    },
                    "initialDelaySeconds": 1,
                    "timeoutSeconds": 1,
                    "periodSeconds": 10,
                    "successThreshold": 1,
                    "failureThreshold": 3
                },
                "terminationMessagePath": "/dev/termination-log",
                "imagePullPolicy": "IfNotPresent"
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {}
    }
}
"#;

    fn cats(version: usize) -> PodTemplateSpec {
        serde_json::from_str(&POD_SPEC.replacen("@@VERSION@@", &version.to_string(), 1)).unwrap()
    }

    #[test]
    fn pod_template_spec_hash() {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for i in 0..1000 {
            let hash = compute_hash(&cats(i), None);
            if let Some(old) = seen.insert(hash, i) {
                panic!("Hash collision, old: {old} new: {i}");
            }
        }
    }

    #[test]
    fn fnv32a_vectors() {
        // Published FNV-1a 32-bit test vectors.
        for (input, want) in [
            ("", 0x811c_9dc5_u32),
            ("a", 0xe40c_292c),
            ("foobar", 0xbf9c_f968),
        ] {
            let mut h = Fnv32a::new();
            h.update(input.as_bytes());
            assert_eq!(h.0, want, "{input:?}");
        }
    }

    #[test]
    fn safe_encoding_maps_digits_by_character_code() {
        // '0' is 48 → 48 % 27 = 21 → '4'; '9' is 57 → 3 → 'f'.
        assert_eq!(safe_encode_string("0123456789"), "456789bcdf");
    }

    /// Pinned values, computed independently of this code (Python: `json.dumps(t, sort_keys=True,
    /// separators=(',', ':'))`, FNV-1a 32, the same collision-count bytes and alphabet). If one
    /// changes, ReplicaSets created from now on get different names than their predecessors for
    /// the same template — do not update them casually.
    #[test]
    fn golden_hashes() {
        let cases = [
            (PodTemplateSpec::default(), None, "5859f96865"),
            (cats(0), None, "b4f79bd9"),
            (cats(0), Some(0), "5bd559b95c"),
            (cats(0), Some(1), "5588f84d8"),
            (cats(999), None, "5bcf78dbc6"),
        ];
        for (template, collision_count, want) in cases {
            assert_eq!(
                compute_hash(&template, collision_count),
                want,
                "{collision_count:?}"
            );
        }
    }

    #[test]
    fn canonical_json_is_sorted_and_compact() {
        let json = canonical_json(&cats(7));
        assert!(
            json.starts_with(
                r#"{"metadata":{"labels":{"app":"cats"}},"spec":{"containers":[{"env":"#
            ),
            "{json}"
        );
        assert!(!json.contains(' '), "{json}");
    }

    #[test]
    fn collision_count_changes_the_hash() {
        let t = cats(1);
        let plain = compute_hash(&t, None);
        assert_ne!(plain, compute_hash(&t, Some(1)));
        assert_ne!(compute_hash(&t, Some(1)), compute_hash(&t, Some(2)));
        assert!(plain.bytes().all(|b| SAFE_ALPHABET.contains(&b)));
    }
}
