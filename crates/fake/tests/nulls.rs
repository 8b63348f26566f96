//! `null` in written objects, as kube-apiserver treats it: the shared table
//! (`null_cases`), which `tests/e2e/nulls.rs` also runs against a real kube-apiserver.

mod null_cases;

use kctrl_fake::FakeApi;

#[tokio::test]
async fn null_cases_end_as_on_kube_apiserver() {
    let fake = FakeApi::new();
    fake.register_crd(&null_cases::nullish_crd());
    for (index, case) in null_cases::cases().iter().enumerate() {
        let observed = null_cases::run(&fake.client(), "default", index, case).await;
        null_cases::check("kctrl-fake", case, &observed);
    }
}

#[tokio::test]
async fn a_derived_resource_takes_none_in_every_write() {
    let fake = FakeApi::new();
    fake.register_crd(&null_cases::optional_crd());
    for (write, result) in null_cases::write_optionals(&fake.client(), "default").await {
        assert_eq!(result, Ok(None), "{write}");
    }
}
