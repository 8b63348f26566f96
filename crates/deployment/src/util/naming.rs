//! The name of a Deployment's ReplicaSet: `<deployment>-<pod-template-hash>`, with the Deployment
//! part truncated so that the whole fits in an object name (253 characters).
//!
//! Upstream: `generateReplicaSetName` in sync.go (1.35+). Only the Deployment part is ever cut;
//! a hash too long to leave room for any of it yields the untruncated concatenation, as upstream.

use super::constants::{DNS1123_SUBDOMAIN_MAX_LENGTH, REPLICA_SET_NAME_SEPARATOR};

/// `generateReplicaSetName(deploymentName, podTemplateSpecHash)`.
pub fn generate_replica_set_name(deployment_name: &str, pod_template_spec_hash: &str) -> String {
    let max_deployment_len = DNS1123_SUBDOMAIN_MAX_LENGTH as i64
        - REPLICA_SET_NAME_SEPARATOR.len() as i64
        - pod_template_spec_hash.len() as i64;
    let name = if max_deployment_len > 0 && deployment_name.len() as i64 > max_deployment_len {
        // Object names are ASCII (DNS-1123), so a byte cut is a character cut; stay on a char
        // boundary regardless.
        let mut cut = max_deployment_len as usize;
        while !deployment_name.is_char_boundary(cut) {
            cut -= 1;
        }
        &deployment_name[..cut]
    } else {
        deployment_name
    };
    format!("{name}{REPLICA_SET_NAME_SEPARATOR}{pod_template_spec_hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TestGenerateReplicaSetName.
    #[test]
    fn generate_replica_set_name_table() {
        let (a, b, d, h) = (
            "a".repeat(242),
            "b".repeat(250),
            "d".repeat(252),
            "h".repeat(252),
        );
        let cases = [
            (
                "short name",
                "my-deployment",
                "abcde12345",
                "my-deployment-abcde12345".to_owned(),
            ),
            (
                "maximum length without truncating",
                a.as_str(),
                "abcde12345",
                format!("{a}-abcde12345"),
            ),
            (
                "very long deployment name is truncated",
                b.as_str(),
                "abcde12345",
                format!("{}-abcde12345", "b".repeat(242)),
            ),
            (
                "very long hash is not truncated",
                d.as_str(),
                h.as_str(),
                format!("{d}-{h}"),
            ),
        ];
        for (name, deployment, hash, want) in cases {
            assert_eq!(generate_replica_set_name(deployment, hash), want, "{name}");
        }
    }

    #[test]
    fn names_fit_for_real_hashes() {
        // Not upstream: the arithmetic behind TestDeploymentController_generateReplicaSetName
        // (ported through the controller in controller_tests.rs): a hash of the length
        // `compute_hash` produces leaves 242 characters of Deployment name.
        let name = generate_replica_set_name(&"a".repeat(250), "5d4b9c8f7c");
        assert_eq!(name.len(), DNS1123_SUBDOMAIN_MAX_LENGTH);
        assert_eq!(name.rsplit_once('-').unwrap().0, "a".repeat(242));
    }
}
