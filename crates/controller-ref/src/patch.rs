//! The two strategic-merge patches that move ownership, byte for byte as upstream builds them.
//!
//! Both carry the owned object's `metadata.uid`: the API server rejects the patch (422) when
//! the object was deleted and recreated under the same name, so a stale claim never touches
//! the new object.

use serde::Serialize;
use serde_json::Value;

use crate::owner::Owner;

/// Adopt: `{"metadata":{"ownerReferences":[<owner as controller>],"uid":..,"finalizers":..}}`.
#[derive(Serialize)]
struct AdoptPatch<'a> {
    metadata: AdoptMeta<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AdoptMeta<'a> {
    owner_references: [ControllerRef<'a>; 1],
    uid: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    finalizers: &'a [String],
}

/// An ownerReference in `metav1.OwnerReference`'s field order (k8s-openapi sorts its fields).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ControllerRef<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    uid: &'a str,
    controller: bool,
    block_owner_deletion: bool,
}

/// Release: `{"metadata":{"uid":..,"ownerReferences":[{"$patch":"delete","uid":..}],..}}`.
#[derive(Serialize)]
struct ReleasePatch<'a> {
    metadata: ReleaseMeta<'a>,
}

#[derive(Serialize)]
struct ReleaseMeta<'a> {
    uid: &'a str,
    /// `null` when there are no owners, as Go marshals a nil slice.
    #[serde(rename = "ownerReferences")]
    owner_references: Option<Vec<DeleteOwnerRef<'a>>>,
    #[serde(
        rename = "$deleteFromPrimitiveList/finalizers",
        skip_serializing_if = "<[String]>::is_empty"
    )]
    delete_finalizers: &'a [String],
}

/// Go marshals this as a `map[string]string`, so its keys come sorted: `$patch`, `uid`.
#[derive(Serialize)]
struct DeleteOwnerRef<'a> {
    #[serde(rename = "$patch")]
    patch: &'static str,
    uid: &'a str,
}

fn adopt<'a>(owner: &'a Owner, owned_uid: &'a str, finalizers: &'a [String]) -> AdoptPatch<'a> {
    AdoptPatch {
        metadata: AdoptMeta {
            owner_references: [ControllerRef {
                api_version: &owner.api_version,
                kind: &owner.kind,
                name: &owner.name,
                uid: &owner.uid,
                controller: true,
                block_owner_deletion: true,
            }],
            uid: owned_uid,
            finalizers,
        },
    }
}

fn release<'a>(
    owned_uid: &'a str,
    owner_uids: &'a [&'a str],
    finalizers: &'a [String],
) -> ReleasePatch<'a> {
    ReleasePatch {
        metadata: ReleaseMeta {
            uid: owned_uid,
            owner_references: (!owner_uids.is_empty()).then(|| {
                owner_uids
                    .iter()
                    .map(|uid| DeleteOwnerRef {
                        patch: "delete",
                        uid,
                    })
                    .collect()
            }),
            delete_finalizers: finalizers,
        },
    }
}

// Serializing these structs cannot fail: they hold only strings, booleans and sequences.
const INFALLIBLE: &str = "a patch of strings and booleans always serializes";

/// The adopt patch as a JSON value (for [`Patch::Strategic`](kctrl_client::Patch)): `owner`
/// becomes the controller of the object with uid `owned_uid`, and `finalizers` are added.
pub fn adopt_patch(owner: &Owner, owned_uid: &str, finalizers: &[String]) -> Value {
    serde_json::to_value(adopt(owner, owned_uid, finalizers)).expect(INFALLIBLE)
}

/// [`adopt_patch`] as the exact bytes upstream's `ownerRefControllerPatch` produces.
pub fn adopt_patch_bytes(owner: &Owner, owned_uid: &str, finalizers: &[String]) -> Vec<u8> {
    serde_json::to_vec(&adopt(owner, owned_uid, finalizers)).expect(INFALLIBLE)
}

/// The release patch as a JSON value: deletes the ownerReferences with `owner_uids` from the
/// object with uid `owned_uid`, and removes `finalizers` from it.
pub fn release_patch(owned_uid: &str, owner_uids: &[&str], finalizers: &[String]) -> Value {
    serde_json::to_value(release(owned_uid, owner_uids, finalizers)).expect(INFALLIBLE)
}

/// [`release_patch`] as the exact bytes of upstream's
/// `GenerateDeleteOwnerRefStrategicMergeBytes` (key order `uid`, `ownerReferences`,
/// `$deleteFromPrimitiveList/finalizers`).
pub fn release_patch_bytes(owned_uid: &str, owner_uids: &[&str], finalizers: &[String]) -> Vec<u8> {
    serde_json::to_vec(&release(owned_uid, owner_uids, finalizers)).expect(INFALLIBLE)
}
