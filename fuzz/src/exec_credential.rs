//! `exec_credential`: an exec credential plugin's stdout, parsed as the transport does.
//!
//! Properties:
//! * never panics, for either API version;
//! * an accepted output has the configured `apiVersion`, `kind: ExecCredential`, and a
//!   non-empty token or a certificate/key pair;
//! * errors name the command and never echo credential material: when the output is a JSON
//!   object, its `status.token` and `status.clientKeyData` are replaced with marker values and
//!   the error for that output must not contain the markers.

use kctrl_config::ExecApiVersion;
use kctrl_config::fuzzing::parse_exec_output;
use serde_json::Value;

use crate::json::skipped_unchecked;

const COMMAND: &str = "fuzz-credential-plugin";
const TOKEN_MARKER: &str = "TOKENMARKER-d41d8cd98f00b204e9800998ecf8427e";
const KEY_MARKER: &str = "KEYMARKER-0cc175b9c0f1b6a831c399e269772661";

/// The property function.
pub fn check(data: &[u8]) {
    // Unknown fields are skipped without validating their UTF-8, so the reference reads the
    // text with invalid bytes replaced (they can only sit inside strings of valid JSON).
    // Nor are their `\u` escapes paired or their numbers ranged, as Go's decoder does not
    // refuse them either; the reference has no reading of such a text.
    let reading = serde_json::from_str::<Value>(&String::from_utf8_lossy(data));
    let skippable = matches!(&reading, Err(e) if skipped_unchecked(e));
    let parsed = reading.ok();
    for version in [ExecApiVersion::V1, ExecApiVersion::V1Beta1] {
        match parse_exec_output(COMMAND, version, data) {
            Ok(status) => {
                let Some(value) = parsed.as_ref() else {
                    assert!(skippable, "accepted output that is not JSON");
                    continue;
                };
                assert_eq!(value["apiVersion"], version.as_str());
                assert_eq!(value["kind"], "ExecCredential");
                let token = status.token.as_ref().map(|t| t.expose().as_str());
                assert!(
                    token.is_some_and(|t| !t.is_empty()) || status.identity.is_some(),
                    "accepted output without a credential"
                );
            }
            Err(e) => assert!(e.to_string().contains(COMMAND), "{e}"),
        }

        // The same output carrying marker secrets.
        let Some(Value::Object(mut object)) = parsed.clone() else {
            continue;
        };
        if let Some(Value::Object(status)) = object.get_mut("status") {
            for (field, marker) in [("token", TOKEN_MARKER), ("clientKeyData", KEY_MARKER)] {
                if status.contains_key(field) {
                    status.insert(field.to_owned(), Value::String(marker.to_owned()));
                }
            }
        }
        let marked = serde_json::to_vec(&object).expect("serializes");
        if let Err(e) = parse_exec_output(COMMAND, version, &marked) {
            let text = format!("{e} {e:?}");
            for marker in [TOKEN_MARKER, KEY_MARKER] {
                let in_input = data.windows(marker.len()).any(|w| w == marker.as_bytes());
                assert!(
                    in_input || !text.contains(marker),
                    "the error shows a secret: {text}"
                );
            }
        }
    }
}
