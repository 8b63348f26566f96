//! `null` in written objects against a real kube-apiserver, with kctrl-fake beside it: the
//! table shared with kctrl-fake's own tests (`crates/fake/tests/null_cases`) must end on the
//! real server as it says and the fake must observe exactly what the real server did; and a
//! custom resource derived with `#[derive(CustomResource)]`, every `Option` `None`, is
//! accepted by create, update and server-side apply and reads back as written.

#[path = "../../crates/fake/tests/null_cases/mod.rs"]
mod null_cases;

use kctrl_e2e::{TestNamespace, install_crd, require_cluster, uninstall_crd};
use kctrl_fake::FakeApi;

#[tokio::test]
async fn null_cases_agree_between_the_apiserver_and_the_fake() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let crd = null_cases::nullish_crd();
    install_crd(&client, &crd, &null_cases::nullishes()).await;
    let ns = TestNamespace::create(&client, "nulls").await;
    for (index, case) in null_cases::cases().iter().enumerate() {
        let real = null_cases::run(&client, &ns.name, index, case).await;
        null_cases::check("kube-apiserver", case, &real);
        let fake = FakeApi::new();
        fake.register_crd(&crd);
        let faked = null_cases::run(&fake.client_in(&ns.name), &ns.name, index, case).await;
        assert_eq!(
            faked, real,
            "case {:?}: kctrl-fake (left) observed otherwise than kube-apiserver (right)",
            case.name
        );
    }
    ns.delete().await;
    uninstall_crd(&client, crd.metadata.name.as_deref().unwrap_or_default()).await;
}

#[tokio::test]
async fn a_derived_resource_takes_none_in_every_write() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let crd = null_cases::optional_crd();
    install_crd(
        &client,
        &crd,
        &kctrl_client::ResourceRef::of::<null_cases::Optional>(),
    )
    .await;
    let ns = TestNamespace::create(&client, "optional").await;
    let real = null_cases::write_optionals(&client, &ns.name).await;
    for (write, result) in &real {
        assert_eq!(result, &Ok(None), "kube-apiserver, {write}");
    }
    let fake = FakeApi::new();
    fake.register_crd(&crd);
    let faked = null_cases::write_optionals(&fake.client_in(&ns.name), &ns.name).await;
    assert_eq!(faked, real, "kctrl-fake (left) and kube-apiserver (right)");
    ns.delete().await;
    uninstall_crd(&client, crd.metadata.name.as_deref().unwrap_or_default()).await;
}
