//! Server-side apply against a real kube-apiserver, with kctrl-fake beside it: every case
//! of the table shared with kctrl-fake's own tests (`crates/fake/tests/apply_cases`) runs on
//! both, each step must end as the table says on the real server, and the fake must observe
//! exactly what the real server did (fields, managers and their fields, failures with
//! their causes).

#[path = "../../crates/fake/tests/apply_cases/mod.rs"]
mod apply_cases;

use kctrl_e2e::{TestNamespace, require_cluster};
use kctrl_fake::FakeApi;

#[tokio::test]
async fn apply_cases_agree_between_the_apiserver_and_the_fake() {
    let cluster = require_cluster!();
    let client = cluster.admin();
    let ns = TestNamespace::create(&client, "apply").await;
    for (index, case) in apply_cases::cases().iter().enumerate() {
        let real = apply_cases::run(&client, &ns.name, index, case).await;
        apply_cases::check("kube-apiserver", case, &real);
        let fake = FakeApi::new();
        let faked = apply_cases::run(&fake.client_in(&ns.name), &ns.name, index, case).await;
        for (step, (r, f)) in real.iter().zip(&faked).enumerate() {
            assert_eq!(
                f, r,
                "case {:?}, step {step}: kctrl-fake (left) observed otherwise than kube-apiserver (right)",
                case.name
            );
        }
    }
    ns.delete().await;
}
