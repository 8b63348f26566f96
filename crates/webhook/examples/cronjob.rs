//! The CronJob of kubebuilder's tutorial (`batch.tutorial.kubebuilder.io/v1`) with its two
//! webhooks:
//!
//! - **defaulting** (`/mutate-batch-tutorial-kubebuilder-io-v1-cronjob`, `mcronjob-v1.kb.io`):
//!   `concurrencyPolicy: Allow`, `suspend: false`, `successfulJobsHistoryLimit: 3` and
//!   `failedJobsHistoryLimit: 1` where they are not set;
//! - **validating** (`/validate-batch-tutorial-kubebuilder-io-v1-cronjob`, `vcronjob-v1.kb.io`):
//!   refuses a schedule that is not a 5-field cron expression and a name longer than 52
//!   characters (a Job's name gets an 11-character suffix, a label value holds 63), `422
//!   Invalid` with a cause per field, as the tutorial's `apierrors.NewInvalid`.
//!
//! `cargo run -p kctrl-webhook --example cronjob -- crd` prints the CRD (JSON, for `kubectl
//! apply --server-side -f -`); without arguments it serves on `:9443` with `tls.crt` and
//! `tls.key` from `$CERT_DIR` (or controller-runtime's default directory) until stopped.
//! `tests/e2e/webhook.rs` registers these webhooks with a real API server.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kctrl_client::CustomResource;
use kctrl_webhook::{
    AdmissionRequest, Defaulter, Denied, FieldError, ServerBuilder, Validator, Warnings, Webhook,
    WebhookServer,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// CronJobSpec defines the desired state of CronJob.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "batch.tutorial.kubebuilder.io",
    version = "v1",
    kind = "CronJob",
    namespaced,
    status = "CronJobStatus"
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CronJobSpec {
    /// The schedule in Cron format, see <https://en.wikipedia.org/wiki/Cron>.
    pub schedule: String,
    /// Deadline in seconds for starting the job if it misses its scheduled time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starting_deadline_seconds: Option<i64>,
    /// How to treat concurrent executions of a Job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency_policy: Option<ConcurrencyPolicy>,
    /// Tells the controller to suspend subsequent executions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// The job that will be created when executing a CronJob.
    pub job_template: JobTemplateSpec,
    /// The number of successful finished jobs to retain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub successful_jobs_history_limit: Option<i32>,
    /// The number of failed finished jobs to retain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_jobs_history_limit: Option<i32>,
}

/// How to treat concurrent executions of a Job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub(crate) enum ConcurrencyPolicy {
    /// Allows CronJobs to run concurrently.
    Allow,
    /// Forbids concurrent runs, skipping the next run if the previous hasn't finished yet.
    Forbid,
    /// Cancels the currently running job and replaces it with a new one.
    Replace,
}

/// CronJobStatus defines the observed state of CronJob.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CronJobStatus {
    /// Pointers to currently running jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active: Vec<ObjectReference>,
    /// When the job was last successfully scheduled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
}

/// The CronJob CRD.
pub(crate) fn crd() -> CustomResourceDefinition {
    // Without the descriptions of the embedded Job template: 340 KiB less.
    let mut crd = CronJob::crd();
    kctrl_client::crd::cap_descriptions(&mut crd, 0);
    crd
}

/// The tutorial's two webhooks, in one type.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CronJobWebhook;

impl Defaulter<CronJob> for CronJobWebhook {
    async fn set_defaults(
        &self,
        _: &AdmissionRequest,
        cronjob: &mut CronJob,
    ) -> Result<(), Denied> {
        let spec = &mut cronjob.spec;
        spec.concurrency_policy
            .get_or_insert(ConcurrencyPolicy::Allow);
        spec.suspend.get_or_insert(false);
        spec.successful_jobs_history_limit.get_or_insert(3);
        spec.failed_jobs_history_limit.get_or_insert(1);
        Ok(())
    }
}

/// The longest name: a Job's name is the CronJob's plus an 11-character suffix, and must fit
/// a 63-character label value.
pub(crate) const MAX_NAME_LENGTH: usize = 63 - 11;

impl CronJobWebhook {
    fn validate(cronjob: &CronJob) -> Result<Warnings, Denied> {
        let mut errors = Vec::new();
        let name = cronjob.metadata.name.as_deref().unwrap_or_default();
        if name.len() > MAX_NAME_LENGTH {
            errors.push(FieldError::invalid(
                "metadata.name",
                name,
                format!("must be no more than {MAX_NAME_LENGTH} characters"),
            ));
        }
        if let Err(reason) = check_schedule(&cronjob.spec.schedule) {
            errors.push(FieldError::invalid(
                "spec.schedule",
                cronjob.spec.schedule.as_str(),
                reason,
            ));
        }
        if errors.is_empty() {
            Ok(Vec::new())
        } else {
            Err(Denied::invalid(errors))
        }
    }
}

impl Validator<CronJob> for CronJobWebhook {
    async fn validate_create(
        &self,
        _: &AdmissionRequest,
        cronjob: &CronJob,
    ) -> Result<Warnings, Denied> {
        Self::validate(cronjob)
    }

    async fn validate_update(
        &self,
        _: &AdmissionRequest,
        _old: &CronJob,
        new: &CronJob,
    ) -> Result<Warnings, Denied> {
        Self::validate(new)
    }
}

/// One field of a cron expression: its name, bounds and the names its values may have.
struct CronField {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const CRON_FIELDS: [CronField; 5] = [
    CronField {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    CronField {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    CronField {
        name: "day of month",
        min: 1,
        max: 31,
        names: &[],
    },
    CronField {
        name: "month",
        min: 1,
        max: 12,
        names: &[
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ],
    },
    CronField {
        name: "day of week",
        min: 0,
        max: 6,
        names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    },
];

/// The descriptors that stand for a whole expression.
const CRON_DESCRIPTORS: [&str; 7] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// Checks a standard cron expression: five fields (minute, hour, day of month, month, day
/// of week), each `*` or `?`, a value, a range `a-b`, any of them with a step `/n`, or a
/// comma-separated list of those; months and days of week also by their English
/// abbreviations. Or one of the descriptors `@hourly`, `@daily`... The error says what is
/// wrong, in words for the user.
pub(crate) fn check_schedule(schedule: &str) -> Result<(), String> {
    let schedule = schedule.trim();
    if schedule.starts_with('@') {
        return if CRON_DESCRIPTORS.contains(&schedule) {
            Ok(())
        } else {
            Err(format!(
                "unknown descriptor {schedule}; use one of {}",
                CRON_DESCRIPTORS.join(", ")
            ))
        };
    }
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "a schedule has 5 fields (minute hour day-of-month month day-of-week), this one has {}",
            fields.len()
        ));
    }
    for (text, field) in fields.iter().zip(&CRON_FIELDS) {
        for item in text.split(',') {
            check_item(item, field).map_err(|e| format!("{} field {text:?}: {e}", field.name))?;
        }
    }
    Ok(())
}

/// One item of a list: `*`, `?`, `a`, `a-b`, each optionally `/step`.
fn check_item(item: &str, field: &CronField) -> Result<(), String> {
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => (range, Some(step)),
        None => (item, None),
    };
    if let Some(step) = step {
        match step.parse::<u32>() {
            Ok(n) if n > 0 => {}
            _ => return Err(format!("the step {step:?} is not a positive number")),
        }
    }
    if range == "*" || range == "?" {
        return Ok(());
    }
    let (low, high) = match range.split_once('-') {
        Some((a, b)) => (value(a, field)?, value(b, field)?),
        None => {
            let v = value(range, field)?;
            (v, v)
        }
    };
    if low > high {
        return Err(format!("the range {range:?} goes backwards"));
    }
    Ok(())
}

/// A value of `field`, by number or by name.
fn value(text: &str, field: &CronField) -> Result<u32, String> {
    if let Some(i) = field
        .names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(text))
    {
        return Ok(field.min + i as u32);
    }
    match text.parse::<u32>() {
        Ok(v) if (field.min..=field.max).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{v} is out of range {}-{}", field.min, field.max)),
        Err(_) if text.is_empty() => Err("a value is missing".to_owned()),
        Err(_) => Err(format!("{text:?} is not a number")),
    }
}

/// The server with both webhooks at kubebuilder's paths.
pub(crate) fn server() -> ServerBuilder {
    WebhookServer::builder()
        .webhook(Webhook::defaulting::<CronJob, _>(CronJobWebhook))
        .webhook(Webhook::validating::<CronJob, _>(CronJobWebhook))
}

#[allow(dead_code)] // tests/e2e/webhook.rs includes this file for its types and webhooks alone.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("crd") {
        println!("{}", serde_json::to_string_pretty(&crd())?);
        return Ok(());
    }
    let mut builder = server();
    if let Some(dir) = std::env::var_os("CERT_DIR") {
        builder = builder.cert_dir(dir);
    }
    // Never cancelled: serves until the process is stopped.
    let running = builder
        .build()?
        .start(tokio_util::sync::CancellationToken::new())
        .await?;
    println!("serving on {}", running.local_addr());
    running.stopped().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_schedule;

    #[test]
    fn schedules() {
        for ok in [
            "*/1 * * * *",
            "0 0 * * *",
            "5,10-20/5 0-23 1,15 JAN-mar SUN",
            "@hourly",
            "0 12 ? * MON-FRI",
            " 0 1 * * * ",
        ] {
            assert_eq!(check_schedule(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            (
                "* * * *",
                "a schedule has 5 fields (minute hour day-of-month month day-of-week), this one has 4",
            ),
            (
                "every minute",
                "a schedule has 5 fields (minute hour day-of-month month day-of-week), this one has 2",
            ),
            ("60 * * * *", "minute field \"60\": 60 is out of range 0-59"),
            (
                "* * 0 * *",
                "day of month field \"0\": 0 is out of range 1-31",
            ),
            (
                "* * * FOO *",
                "month field \"FOO\": \"FOO\" is not a number",
            ),
            (
                "*/0 * * * *",
                "minute field \"*/0\": the step \"0\" is not a positive number",
            ),
            (
                "5-1 * * * *",
                "minute field \"5-1\": the range \"5-1\" goes backwards",
            ),
            ("1, * * * *", "minute field \"1,\": a value is missing"),
            (
                "@often",
                "unknown descriptor @often; use one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly",
            ),
        ] {
            assert_eq!(check_schedule(bad), Err(why.to_owned()), "{bad}");
        }
    }
}
