//! Capping the descriptions of a CustomResourceDefinition's schemas (controller-gen's
//! `maxDescLen`): every doc comment of the Rust types becomes a `description`, and a CRD that
//! embeds Kubernetes types (a `PodTemplateSpec` carries the whole Pod API's documentation)
//! grows past what client-side `kubectl apply` can store (its
//! `kubectl.kubernetes.io/last-applied-configuration` annotation is limited to 256 KiB).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

/// Caps every schema `description` of `crd` at `max_len` characters: `0` removes them all;
/// a longer one keeps its whole sentences that fit (up to the last `.` within the limit), or
/// its first `max_len` characters when not even the first sentence fits. The printer columns'
/// descriptions are left alone (they are short, and `kubectl explain` does not show them).
///
/// ```
/// use kctrl_client::crd::{cap_descriptions, CustomResourceExt};
/// use kctrl_client::CustomResource;
///
/// /// A Gadget. It has a long story that nobody reads in the cluster.
/// #[derive(CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// #[resource(group = "example.com", version = "v1", kind = "Gadget", namespaced)]
/// struct GadgetSpec {
///     /// How big it is. Measured in gadget units, which nobody has ever defined.
///     size: i32,
/// }
///
/// let mut crd = Gadget::crd();
/// cap_descriptions(&mut crd, 20);
/// let spec = &crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap()
///     .properties.as_ref().unwrap()["spec"];
/// assert_eq!(spec.description.as_deref(), Some("A Gadget."));
/// assert_eq!(spec.properties.as_ref().unwrap()["size"].description.as_deref(), Some("How big it is."));
/// ```
pub fn cap_descriptions(crd: &mut CustomResourceDefinition, max_len: usize) {
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            cap(schema, max_len);
        }
    }
}

fn cap(schema: &mut JSONSchemaProps, max_len: usize) {
    if let Some(d) = schema.description.take() {
        schema.description = capped(d, max_len);
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        cap(child, max_len);
    }
    match &mut schema.items {
        Some(JSONSchemaPropsOrArray::Schema(s)) => cap(s, max_len),
        Some(JSONSchemaPropsOrArray::Schemas(all)) => all.iter_mut().for_each(|s| cap(s, max_len)),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(s)) = &mut schema.additional_properties {
        cap(s, max_len);
    }
    for junctor in [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of] {
        junctor.iter_mut().flatten().for_each(|s| cap(s, max_len));
    }
    if let Some(not) = &mut schema.not {
        cap(not, max_len);
    }
}

/// `d` within `max_len` characters, `None` when nothing is left.
fn capped(d: String, max_len: usize) -> Option<String> {
    if d.chars().count() <= max_len {
        return (!d.is_empty()).then_some(d);
    }
    let head: String = d.chars().take(max_len).collect();
    let kept = match head.rfind('.') {
        Some(end) if end > 0 => head[..=end].to_owned(),
        _ => head,
    };
    let kept = kept.trim_end().to_owned();
    (!kept.is_empty()).then_some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_sentences_that_fit_else_the_first_characters() {
        let s = |d: &str, n| capped(d.to_owned(), n);
        assert_eq!(s("Short.", 10).as_deref(), Some("Short."));
        assert_eq!(s("One. Two. Three.", 10).as_deref(), Some("One. Two."));
        assert_eq!(
            s("A first sentence that is long.", 7).as_deref(),
            Some("A first")
        );
        assert_eq!(s("anything", 0), None);
        assert_eq!(s("", 5), None);
        // Characters, not bytes: a cut never splits one.
        assert_eq!(s("ééééé", 3).as_deref(), Some("ééé"));
    }
}
