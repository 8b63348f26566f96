//! The reviews: TokenReviews and SubjectAccessReviews created on the API server, their
//! retries and their request counters.

use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use k8s_openapi::api::authorization::v1::{
    SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use kctrl_client::{Api, Client, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tracing::debug;

use super::{AuthError, REVIEW_TIMEOUT};

/// Attempts per review, and the first delay between two (then ×1.5, ±20%).
const REVIEW_ATTEMPTS: u32 = 5;
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);

/// The two reviews the API server performs for us.
pub(crate) trait Reviews: Send + Sync {
    /// Creates a TokenReview of `token`; its status.
    fn token_review(
        &self,
        token: String,
    ) -> BoxFuture<'_, Result<Option<TokenReviewStatus>, kctrl_client::Error>>;
    /// Creates a SubjectAccessReview of `spec`; its status.
    fn access_review(
        &self,
        spec: SubjectAccessReviewSpec,
    ) -> BoxFuture<'_, Result<Option<SubjectAccessReviewStatus>, kctrl_client::Error>>;
}

/// The `code` label of the review request counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: String,
}

/// Counters of the review requests, by answer: upstream's
/// `apiserver_delegated_authn_request_total` and `apiserver_delegated_authz_request_total`.
#[derive(Clone, Default)]
pub(crate) struct ReviewMetrics {
    authn: Family<CodeLabel, Counter>,
    authz: Family<CodeLabel, Counter>,
}

impl ReviewMetrics {
    /// Registers the two counters in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "apiserver_delegated_authn_request",
            "Number of HTTP requests partitioned by status code (or <error>) made for delegated authentication (TokenReviews)",
            metrics.authn.clone(),
        );
        registry.register(
            "apiserver_delegated_authz_request",
            "Number of HTTP requests partitioned by status code (or <error>) made for delegated authorization (SubjectAccessReviews)",
            metrics.authz.clone(),
        );
        metrics
    }
}

/// The code an attempt is counted under: the HTTP status, or `<error>` without one.
fn code_of<T>(result: &Result<T, kctrl_client::Error>) -> String {
    match result {
        Ok(_) => "201".to_owned(),
        Err(e) => e
            .api_error()
            .map_or_else(|| "<error>".to_owned(), |a| a.code.to_string()),
    }
}

/// [`Reviews`] through the API: creates of `tokenreviews` and `subjectaccessreviews`.
pub(crate) struct ApiReviews {
    authn: Option<Client>,
    authz: Option<Client>,
    metrics: ReviewMetrics,
}

impl ApiReviews {
    /// Reviews through `authn` (TokenReviews) and `authz` (SubjectAccessReviews).
    pub(crate) fn new(
        authn: Option<Client>,
        authz: Option<Client>,
        metrics: ReviewMetrics,
    ) -> Self {
        Self {
            authn,
            authz,
            metrics,
        }
    }
}

impl Reviews for ApiReviews {
    fn token_review(
        &self,
        token: String,
    ) -> BoxFuture<'_, Result<Option<TokenReviewStatus>, kctrl_client::Error>> {
        Box::pin(async move {
            let client = self.authn.clone().ok_or_else(|| {
                kctrl_client::Error::InvalidRequest("no TokenReview client".to_owned())
            })?;
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token,
                    audiences: None,
                },
                ..TokenReview::default()
            };
            let result = Api::<TokenReview>::all(client)
                .create(&PostParams::default(), &review)
                .await;
            self.metrics
                .authn
                .get_or_create(&CodeLabel {
                    code: code_of(&result),
                })
                .inc();
            result.map(|r| r.status)
        })
    }

    fn access_review(
        &self,
        spec: SubjectAccessReviewSpec,
    ) -> BoxFuture<'_, Result<Option<SubjectAccessReviewStatus>, kctrl_client::Error>> {
        Box::pin(async move {
            let client = self.authz.clone().ok_or_else(|| {
                kctrl_client::Error::InvalidRequest("no SubjectAccessReview client".to_owned())
            })?;
            let review = SubjectAccessReview {
                spec,
                ..SubjectAccessReview::default()
            };
            let result = Api::<SubjectAccessReview>::all(client)
                .create(&PostParams::default(), &review)
                .await;
            self.metrics
                .authz
                .get_or_create(&CodeLabel {
                    code: code_of(&result),
                })
                .inc();
            result.map(|r| r.status)
        })
    }
}

/// Whether a failed review attempt is worth another, as upstream's webhook decides: a
/// connection reset or aborted mid-request, or an answer of 500 (internal error), 504 / reason
/// `Timeout`, or 429. A refused connection or a client-side timeout is not retried.
fn retryable(e: &kctrl_client::Error) -> bool {
    if let Some(api) = e.api_error() {
        return matches!(api.code, 429 | 500 | 504)
            || matches!(
                api.status.reason.as_deref(),
                Some("InternalError" | "Timeout" | "TooManyRequests")
            );
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
            )
        {
            return true;
        }
        source = err.source();
    }
    false
}

/// Runs `attempt` until it succeeds, fails for good, or [`REVIEW_TIMEOUT`] passes.
pub(super) async fn with_retries<T, F, Fut>(
    review: &'static str,
    mut attempt: F,
) -> Result<T, AuthError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kctrl_client::Error>>,
{
    let deadline = Instant::now() + REVIEW_TIMEOUT;
    let timed_out = || AuthError::ReviewTimedOut {
        review,
        after: REVIEW_TIMEOUT,
    };
    let mut delay = FIRST_RETRY_DELAY;
    for n in 1..=REVIEW_ATTEMPTS {
        match tokio::time::timeout_at(deadline, attempt()).await {
            Err(_) => return Err(timed_out()),
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(source)) if n < REVIEW_ATTEMPTS && retryable(&source) => {
                debug!(review, attempt = n, error = %source, "review failed; retrying");
                let jitter = 0.8 + 0.4 * fastrand::f64();
                if tokio::time::timeout_at(deadline, tokio::time::sleep(delay.mul_f64(jitter)))
                    .await
                    .is_err()
                {
                    return Err(timed_out());
                }
                delay = delay.mul_f64(1.5);
            }
            Ok(Err(source)) => return Err(AuthError::Review { review, source }),
        }
    }
    Err(timed_out())
}
