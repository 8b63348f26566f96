//! Delegated authentication and authorization of the endpoints, as kube-controller-manager
//! does it (k8s.io/apiserver's `DelegatingAuthenticationOptions` and
//! `DelegatingAuthorizationOptions`, with its `--authentication-*` / `--authorization-*`
//! flags and their defaults).
//!
//! Every request is first **authenticated**:
//!
//! - an `Authorization: Bearer <token>` header is checked with a `TokenReview`
//!   (authentication.k8s.io/v1) created on the API server of `--authentication-kubeconfig`
//!   (or the in-cluster ServiceAccount). An answer that authenticates the token gives the
//!   user (with the group `system:authenticated` added); a token the API server does not
//!   authenticate, and a review that fails (API server unreachable, 5xx, timeout, refused),
//!   answer `401 Unauthorized` — on every path, `/healthz` included, as upstream. A token
//!   longer than [`MAX_TOKEN_BYTES`] answers 401 without a review;
//! - a request without that header (or with another scheme, or an empty token) is
//!   anonymous: user `system:anonymous`, group `system:unauthenticated`;
//! - with a client CA (`--client-ca-file`, else the `client-ca-file` the API server publishes
//!   in the ConfigMap kube-system/extension-apiserver-authentication, unless
//!   `--authentication-skip-lookup`; either is read again periodically, see [`ClientCa`]), a
//!   client certificate presented in the TLS handshake is
//!   verified against those CAs (chain, validity, client-auth usage); a valid one authenticates its
//!   subject: the common name is the user, the organizations are the groups. It is tried
//!   before the token; an invalid certificate answers 401 unless a token authenticates;
//! - without a review client (no `--authentication-kubeconfig` and not in a cluster) and
//!   without a client CA, every request is anonymous and tokens are not looked at.
//!
//! Then **authorized**, as a non-resource request: the verb is the HTTP method in lower case
//! (`GET` → `get`), the path is the request path. In order: a member of `system:masters` is
//! allowed; a path of `--authorization-always-allow-paths` (default `/healthz`, `/readyz`,
//! `/livez`; an entry ending in `*` is a prefix) is allowed for anyone; otherwise a
//! `SubjectAccessReview` (authorization.k8s.io/v1) created on the API server of
//! `--authorization-kubeconfig` decides. Not allowed answers `403 Forbidden` naming the user,
//! verb and path; a review that fails answers `500` — the request is never let through. Without
//! a review client only the first two rules apply, so every other path is forbidden.
//!
//! Answers are cached (`--authentication-token-webhook-cache-ttl`,
//! `--authorization-webhook-cache-authorized-ttl`, `--authorization-webhook-cache-unauthorized-ttl`,
//! 10 s each; 0 turns a cache off), keyed by keyed hashes (see the `token_cache` module), and
//! requests with one token share its review while it is under way. Failed reviews are never
//! cached. A request may wait on reviews only with a slot of a [`ReviewBudget`]; with none
//! free it is answered `429` at once. A review is retried,
//! as upstream's webhook backoff retries it, when the connection was reset or the API server
//! answered 500, 504 or 429: after 0.5 s, 0.75 s, … (five attempts, ±20% jitter), within 10 s
//! in all. A refused connection fails at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{AUTHORIZATION, HeaderMap};
use hyper::{Method, Response, Uri};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use rustls::pki_types::CertificateDer;
use tokio::sync::{Semaphore, SemaphorePermit};
use tracing::{debug, warn};

mod client_ca;
mod response;
mod review;
mod token_cache;

pub(crate) use client_ca::ClientCa;
#[cfg(test)]
pub(crate) use client_ca::{
    AUTHENTICATION_CONFIGMAP, CONFIGMAP_RELOAD_INTERVAL, ClientCertificates, FILE_RELOAD_INTERVAL,
};
use response::{forbidden, internal_error, too_many_requests, unauthorized};
use review::with_retries;
pub(crate) use review::{ApiReviews, ReviewMetrics, Reviews};
pub(crate) use token_cache::MAX_TOKEN_BYTES;
use token_cache::{KeyHasher, TokenCache, TokenOutcome, TtlCache};

/// The user of a request without credentials.
pub(crate) const ANONYMOUS_USER: &str = "system:anonymous";
/// The group of a request without credentials.
pub(crate) const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The group added to every authenticated user.
pub(crate) const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The group allowed everything without a review.
pub(crate) const MASTERS_GROUP: &str = "system:masters";
/// How long one review may take, retries included (upstream's `TokenRequestTimeout` and
/// `ClientTimeout`).
pub(crate) const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Paths and verbs longer than this together are never cached (upstream's bound).
const MAX_CACHED_ATTRIBUTES: usize = 10_000;

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct UserInfo {
    /// The user name.
    pub(crate) name: String,
    /// The user's UID, if the authenticator knows one.
    pub(crate) uid: String,
    /// The user's groups.
    pub(crate) groups: Vec<String>,
    /// Further attributes (e.g. the pod a ServiceAccount token is bound to).
    pub(crate) extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The user of requests without credentials.
    pub(crate) fn anonymous() -> Self {
        Self {
            name: ANONYMOUS_USER.to_owned(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED_GROUP.to_owned()],
            extra: BTreeMap::new(),
        }
    }
}

/// Why a request could not be authenticated or authorized.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    /// The API server did not authenticate the bearer token.
    #[error("invalid bearer token")]
    InvalidToken,
    /// The API server did not authenticate the bearer token, and said why.
    #[error("the token review did not authenticate the token: {0}")]
    TokenRejected(String),
    /// Creating a review failed (after retries).
    #[error("creating a {review}: {source}")]
    Review {
        /// `TokenReview` or `SubjectAccessReview`.
        review: &'static str,
        /// The client's error.
        #[source]
        source: kctrl_client::Error,
    },
    /// A review took longer than [`REVIEW_TIMEOUT`], retries included.
    #[error("creating a {review}: no answer within {after:?}")]
    ReviewTimedOut {
        /// `TokenReview` or `SubjectAccessReview`.
        review: &'static str,
        /// The bound that expired.
        after: Duration,
    },
    /// The API server answered a review without a status.
    #[error("the API server answered the {review} without a status")]
    NoStatus {
        /// `TokenReview` or `SubjectAccessReview`.
        review: &'static str,
    },
    /// The SubjectAccessReview both allowed and denied the request.
    #[error("the SubjectAccessReview answered both allowed and denied")]
    AllowedAndDenied,
    /// The client certificate does not verify against `--client-ca-file`.
    #[error("verifying the client certificate: {0}")]
    BadClientCertificate(String),
    /// The client CA cannot be read or used.
    #[error("{what}: {reason}")]
    ClientCa {
        /// Where it was read from (`--client-ca-file <path>`, or the ConfigMap's key).
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The bearer token is longer than any this gate reviews.
    #[error(
        "the bearer token is {length} bytes long, more than the {limit} a TokenReview is made for"
    )]
    TokenTooLong {
        /// The token's length in bytes.
        length: usize,
        /// [`MAX_TOKEN_BYTES`].
        limit: usize,
    },
    /// A review made for several requests at once failed.
    #[error(transparent)]
    Shared(Arc<AuthError>),
    /// As many requests as allowed wait on reviews already.
    #[error("{limit} requests are waiting on reviews already")]
    TooManyReviews {
        /// The size of the [`ReviewBudget`].
        limit: usize,
    },
    /// An `--authorization-always-allow-paths` entry has a `*` that is not its last character.
    #[error("--authorization-always-allow-paths: only a trailing * is allowed in {0:?}")]
    BadAlwaysAllowPath(String),
}

impl AuthError {
    /// Whether the error is a verdict on the credentials the caller presented (logged at
    /// debug level: callers control them), rather than a failure of the gate or the API server.
    fn is_about_credentials(&self) -> bool {
        match self {
            Self::InvalidToken
            | Self::TokenRejected(_)
            | Self::TokenTooLong { .. }
            | Self::BadClientCertificate(_) => true,
            Self::Shared(inner) => inner.is_about_credentials(),
            _ => false,
        }
    }
}

/// The bearer token of an `Authorization` header, read as upstream does: the scheme is
/// `Bearer` in any case, the token is the next space-separated word and must not be empty.
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// `--authorization-always-allow-paths`: exact paths, and prefixes (entries ending in `*`).
#[derive(Clone, Debug, Default)]
pub(crate) struct AlwaysAllowPaths {
    exact: Vec<String>,
    prefixes: Vec<String>,
}

impl AlwaysAllowPaths {
    /// Parses the flag's entries; a `*` anywhere but at the end is refused.
    pub(crate) fn parse(entries: &[String]) -> Result<Self, AuthError> {
        let mut paths = Self::default();
        for entry in entries {
            let p = entry.strip_prefix('/').unwrap_or(entry);
            if let Some(prefix) = p.strip_suffix('*') {
                if prefix.contains('*') {
                    return Err(AuthError::BadAlwaysAllowPath(entry.clone()));
                }
                paths.prefixes.push(prefix.to_owned());
            } else if p.contains('*') {
                return Err(AuthError::BadAlwaysAllowPath(entry.clone()));
            } else {
                paths.exact.push(p.to_owned());
            }
        }
        Ok(paths)
    }

    /// Whether `path` is allowed without a review.
    pub(crate) fn allows(&self, path: &str) -> bool {
        let p = path.strip_prefix('/').unwrap_or(path);
        self.exact.iter().any(|e| e == p) || self.prefixes.iter().any(|pre| p.starts_with(pre))
    }
}

/// The settings of a [`Gate`].
#[derive(Clone, Debug)]
pub(crate) struct GateOptions {
    /// Review bearer tokens (an authentication client exists); otherwise every request is
    /// anonymous.
    pub(crate) review_tokens: bool,
    /// Review access (an authorization client exists); otherwise only `system:masters` and
    /// the always-allowed paths are allowed.
    pub(crate) review_access: bool,
    /// `--authentication-token-webhook-cache-ttl`.
    pub(crate) token_cache_ttl: Duration,
    /// `--authorization-webhook-cache-authorized-ttl`.
    pub(crate) authorized_ttl: Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl`.
    pub(crate) unauthorized_ttl: Duration,
    /// `--authorization-always-allow-paths`.
    pub(crate) always_allow: AlwaysAllowPaths,
    /// The client CA (`--client-ca-file`, or the API server's ConfigMap), if there is one.
    pub(crate) client_certificates: Option<Arc<ClientCa>>,
}

/// An authorizer's verdict on one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Serve it.
    Allow,
    /// Forbidden, with the reason to append to the message (possibly empty).
    Forbid(String),
}

/// How many requests may wait on reviews at once. A request that needs a review (its token
/// or its access not cached) while all the slots are taken is answered `429 Too Many
/// Requests` at once instead of waiting, so requests stuck on a slow API server cannot hold
/// every connection the server takes: requests that need no review (the kubelet's probes:
/// no credentials, always-allowed paths) still find one.
#[derive(Clone, Debug)]
pub(crate) struct ReviewBudget {
    slots: Arc<Semaphore>,
    size: usize,
}

impl ReviewBudget {
    /// `size` requests may wait on reviews at once (at least one).
    pub(crate) fn new(size: usize) -> Self {
        let size = size.max(1);
        Self {
            slots: Arc::new(Semaphore::new(size)),
            size,
        }
    }

    /// A ticket for one request, which takes a slot the first time it is about to wait on a
    /// review and keeps it until the request has its answer.
    fn ticket(&self) -> ReviewTicket<'_> {
        ReviewTicket {
            budget: self,
            slot: None,
        }
    }
}

/// One request's claim on the [`ReviewBudget`].
pub(crate) struct ReviewTicket<'a> {
    budget: &'a ReviewBudget,
    slot: Option<SemaphorePermit<'a>>,
}

impl ReviewTicket<'_> {
    /// Takes a slot unless this request holds one; none free is [`AuthError::TooManyReviews`].
    fn claim(&mut self) -> Result<(), AuthError> {
        if self.slot.is_none() {
            let slot = self
                .budget
                .slots
                .try_acquire()
                .map_err(|_| AuthError::TooManyReviews {
                    limit: self.budget.size,
                })?;
            self.slot = Some(slot);
        }
        Ok(())
    }
}

/// Authenticates and authorizes the requests of the endpoints.
pub(crate) struct Gate {
    options: GateOptions,
    reviews: Arc<dyn Reviews>,
    tokens: TokenCache,
    access_keys: KeyHasher,
    access: TtlCache<SubjectAccessReviewStatus>,
}

impl Gate {
    /// A gate reviewing through `reviews` as `options` say.
    pub(crate) fn new(options: GateOptions, reviews: Arc<dyn Reviews>) -> Self {
        Self {
            tokens: TokenCache::new(options.token_cache_ttl),
            options,
            reviews,
            access_keys: KeyHasher::new(),
            access: TtlCache::new(),
        }
    }

    /// The client CA, whose current CAs the TLS server names when it asks for a client
    /// certificate.
    pub(crate) fn client_ca(&self) -> Option<&Arc<ClientCa>> {
        self.options.client_certificates.as_ref()
    }

    /// Who sent a request with these headers over a connection that presented `chain`
    /// (empty without a client certificate): `Ok(None)` for anonymous. The certificate is
    /// tried first (against the client CAs of this moment), then the token; an error of
    /// either only counts when neither authenticates.
    #[cfg(test)]
    pub(crate) async fn authenticate(
        &self,
        headers: &HeaderMap,
        chain: &[CertificateDer<'static>],
    ) -> Result<Option<UserInfo>, AuthError> {
        let budget = ReviewBudget::new(1);
        self.authenticate_within(headers, chain, &mut budget.ticket())
            .await
    }

    /// Who sent a request with these headers over a connection that presented `chain`, as
    /// `authenticate` says, waiting on a review only with a slot of `ticket`'s budget.
    async fn authenticate_within(
        &self,
        headers: &HeaderMap,
        chain: &[CertificateDer<'static>],
        ticket: &mut ReviewTicket<'_>,
    ) -> Result<Option<UserInfo>, AuthError> {
        let mut first_error = None;
        if let Some(certificates) = self
            .options
            .client_certificates
            .as_ref()
            .and_then(|ca| ca.current())
        {
            match certificates.authenticate(chain) {
                Ok(Some(user)) => return Ok(Some(with_authenticated_group(user))),
                Ok(None) => {}
                Err(e) => first_error = Some(e),
            }
        }
        match self.authenticate_token(headers, ticket).await {
            Ok(Some(user)) => Ok(Some(user)),
            Ok(None) => first_error.map_or(Ok(None), Err),
            // Busy is not a verdict on the credentials: it is answered as such.
            Err(e @ AuthError::TooManyReviews { .. }) => Err(e),
            Err(e) => Err(first_error.unwrap_or(e)),
        }
    }

    /// The user of the request's bearer token: `Ok(None)` without one (or without a review
    /// client).
    async fn authenticate_token(
        &self,
        headers: &HeaderMap,
        ticket: &mut ReviewTicket<'_>,
    ) -> Result<Option<UserInfo>, AuthError> {
        if !self.options.review_tokens {
            return Ok(None);
        }
        let Some(token) = bearer_token(headers) else {
            return Ok(None);
        };
        if token.len() > MAX_TOKEN_BYTES {
            return Err(AuthError::TokenTooLong {
                length: token.len(),
                limit: MAX_TOKEN_BYTES,
            });
        }
        let key = self.tokens.key(token);
        let outcome = match self.tokens.cached(&key) {
            Some(outcome) => outcome,
            None => {
                ticket.claim()?;
                self.tokens
                    .review(key, || self.review_token(token.to_owned()))
                    .await?
            }
        };
        match outcome {
            TokenOutcome::User(user) => Ok(Some(user)),
            TokenOutcome::NotAuthenticated => Err(AuthError::InvalidToken),
        }
    }

    /// Creates a TokenReview of `token`: its answer, or why there is none (an error the API
    /// server gave with a negative answer counts as a failure, as upstream does not cache it).
    async fn review_token(&self, token: String) -> Result<TokenOutcome, AuthError> {
        let status = with_retries("TokenReview", || self.reviews.token_review(token.clone()))
            .await?
            .ok_or(AuthError::NoStatus {
                review: "TokenReview",
            })?;
        if status.authenticated != Some(true) {
            return match status.error.filter(|e| !e.is_empty()) {
                Some(error) => Err(AuthError::TokenRejected(error)),
                None => Ok(TokenOutcome::NotAuthenticated),
            };
        }
        let reviewed = status.user.unwrap_or_default();
        Ok(TokenOutcome::User(with_authenticated_group(UserInfo {
            name: reviewed.username.unwrap_or_default(),
            uid: reviewed.uid.unwrap_or_default(),
            groups: reviewed.groups.unwrap_or_default(),
            extra: reviewed.extra.unwrap_or_default(),
        })))
    }

    /// Whether `user` may `verb` the non-resource URL `path`, waiting on a review only with a
    /// slot of `ticket`'s budget.
    async fn authorize_within(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
        ticket: &mut ReviewTicket<'_>,
    ) -> Result<Decision, AuthError> {
        if user.groups.iter().any(|g| g == MASTERS_GROUP) || self.options.always_allow.allows(path)
        {
            return Ok(Decision::Allow);
        }
        if !self.options.review_access {
            return Ok(Decision::Forbid(String::new()));
        }
        let spec = SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
            groups: (!user.groups.is_empty()).then(|| user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_owned()),
                verb: Some(verb.to_owned()),
            }),
            resource_attributes: None,
        };
        let key = serde_json::to_string(&spec)
            .ok()
            .filter(|_| path.len() + verb.len() < MAX_CACHED_ATTRIBUTES)
            .map(|json| self.access_keys.key(&[json.as_bytes()]));
        let cached = key.as_ref().and_then(|key| self.access.get(key));
        let status = match cached {
            Some(status) => status,
            None => {
                ticket.claim()?;
                let status = with_retries("SubjectAccessReview", || {
                    self.reviews.access_review(spec.clone())
                })
                .await?
                .ok_or(AuthError::NoStatus {
                    review: "SubjectAccessReview",
                })?;
                if let Some(key) = key {
                    let ttl = if status.allowed {
                        self.options.authorized_ttl
                    } else {
                        self.options.unauthorized_ttl
                    };
                    self.access.put(key, status.clone(), ttl);
                }
                status
            }
        };
        let reason = status.reason.unwrap_or_default();
        match (status.allowed, status.denied == Some(true)) {
            (true, true) => Err(AuthError::AllowedAndDenied),
            (true, false) => Ok(Decision::Allow),
            // A denial's reason as it is; no opinion's reason named by its authorizer.
            (false, true) => Ok(Decision::Forbid(reason)),
            (false, false) if reason.is_empty() => Ok(Decision::Forbid(String::new())),
            (false, false) => Ok(Decision::Forbid(format!("kubernetes.io/webhook: {reason}"))),
        }
    }

    /// Authenticates and authorizes one request: `Ok` to serve it, or the answer to send
    /// instead (401, 403, 429 or 500). While it waits on a review it holds a slot of
    /// `budget`; with none free it is answered 429 at once.
    pub(crate) async fn admit(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        chain: &[CertificateDer<'static>],
        budget: &ReviewBudget,
    ) -> Result<UserInfo, Response<Full<Bytes>>> {
        let mut ticket = budget.ticket();
        let user = match self.authenticate_within(headers, chain, &mut ticket).await {
            Ok(user) => user.unwrap_or_else(UserInfo::anonymous),
            Err(e) => {
                if let AuthError::TooManyReviews { .. } = e {
                    debug!(path = uri.path(), error = %e, "refusing the request for now");
                    return Err(too_many_requests());
                }
                if e.is_about_credentials() {
                    debug!(path = uri.path(), error = %e, "unable to authenticate the request");
                } else {
                    warn!(path = uri.path(), error = %e, "unable to authenticate the request");
                }
                return Err(unauthorized());
            }
        };
        let verb = method.as_str().to_ascii_lowercase();
        let path = uri.path();
        match self.authorize_within(&user, &verb, path, &mut ticket).await {
            Ok(Decision::Allow) => Ok(user),
            Ok(Decision::Forbid(reason)) => {
                debug!(user = %user.name, verb, path, reason, "forbidden");
                Err(forbidden(&user, &verb, path, &reason))
            }
            Err(e @ AuthError::TooManyReviews { .. }) => {
                debug!(user = %user.name, verb, path, error = %e, "refusing the request for now");
                Err(too_many_requests())
            }
            Err(e) => {
                warn!(user = %user.name, verb, path, error = %e, "authorization failed; refusing the request");
                let uri = uri.path_and_query().map_or(path, |p| p.as_str());
                Err(internal_error(uri, &e))
            }
        }
    }
}

/// `user` with `system:authenticated` added, unless it names either authentication group
/// already (upstream's authenticated-group adder).
fn with_authenticated_group(mut user: UserInfo) -> UserInfo {
    if !user
        .groups
        .iter()
        .any(|g| g == AUTHENTICATED_GROUP || g == UNAUTHENTICATED_GROUP)
    {
        user.groups.push(AUTHENTICATED_GROUP.to_owned());
    }
    user
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;
    use http_body_util::BodyExt;
    use hyper::StatusCode;
    use hyper::header::HeaderValue;
    use k8s_openapi::api::authentication::v1::TokenReviewStatus;
    use k8s_openapi::api::authentication::v1::UserInfo as ReviewedUser;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    const ALLOWED: &str = "allowed-token";
    const NOT_ALLOWED: &str = "valid-token";
    const MASTER: &str = "master-token";

    /// An API server in memory: two valid tokens, one of them allowed `get /metrics`.
    #[derive(Default)]
    struct FakeReviews {
        failing: AtomicBool,
        refusing: AtomicBool,
        token_reviews: AtomicUsize,
        access_reviews: AtomicUsize,
        /// When set, each TokenReview waits for a permit of this semaphore before answering.
        token_release: Option<Arc<tokio::sync::Semaphore>>,
    }

    /// A connection reset mid-request (retried), or refused (not retried).
    fn unavailable(kind: std::io::ErrorKind) -> kctrl_client::Error {
        kctrl_client::Error::Transport {
            verb: "POST".to_owned(),
            url: "https://127.0.0.1:1/apis".to_owned(),
            source: Box::new(std::io::Error::from(kind)),
        }
    }

    impl FakeReviews {
        fn fail(&self) -> Result<(), kctrl_client::Error> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(unavailable(std::io::ErrorKind::ConnectionReset));
            }
            if self.refusing.load(Ordering::SeqCst) {
                return Err(unavailable(std::io::ErrorKind::ConnectionRefused));
            }
            Ok(())
        }
    }

    impl Reviews for FakeReviews {
        fn token_review(
            &self,
            token: String,
        ) -> BoxFuture<'_, Result<Option<TokenReviewStatus>, kctrl_client::Error>> {
            Box::pin(async move {
                self.token_reviews.fetch_add(1, Ordering::SeqCst);
                if let Some(release) = &self.token_release {
                    release.acquire().await.unwrap().forget();
                }
                self.fail()?;
                let name = match token.as_str() {
                    ALLOWED => "system:serviceaccount:monitoring:prometheus",
                    NOT_ALLOWED => "system:serviceaccount:default:nobody",
                    MASTER => "admin",
                    _ => {
                        return Ok(Some(TokenReviewStatus {
                            authenticated: Some(false),
                            ..TokenReviewStatus::default()
                        }));
                    }
                };
                let groups = if token == MASTER {
                    vec![MASTERS_GROUP.to_owned()]
                } else {
                    vec!["system:serviceaccounts".to_owned()]
                };
                Ok(Some(TokenReviewStatus {
                    authenticated: Some(true),
                    user: Some(ReviewedUser {
                        username: Some(name.to_owned()),
                        uid: Some("uid-1".to_owned()),
                        groups: Some(groups),
                        extra: None,
                    }),
                    ..TokenReviewStatus::default()
                }))
            })
        }

        fn access_review(
            &self,
            spec: SubjectAccessReviewSpec,
        ) -> BoxFuture<'_, Result<Option<SubjectAccessReviewStatus>, kctrl_client::Error>> {
            Box::pin(async move {
                self.access_reviews.fetch_add(1, Ordering::SeqCst);
                self.fail()?;
                let attrs = spec.non_resource_attributes.unwrap_or_default();
                let allowed = spec.user.as_deref()
                    == Some("system:serviceaccount:monitoring:prometheus")
                    && spec
                        .groups
                        .as_ref()
                        .is_some_and(|g| g.iter().any(|g| g == AUTHENTICATED_GROUP))
                    && attrs.path.as_deref() == Some("/metrics")
                    && attrs.verb.as_deref() == Some("get");
                Ok(Some(SubjectAccessReviewStatus {
                    allowed,
                    ..SubjectAccessReviewStatus::default()
                }))
            })
        }
    }

    /// kube-controller-manager's default TTLs and paths.
    const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(10);
    const DEFAULT_ALWAYS_ALLOW_PATHS: [&str; 3] = ["/healthz", "/readyz", "/livez"];

    fn options() -> GateOptions {
        GateOptions {
            review_tokens: true,
            review_access: true,
            token_cache_ttl: DEFAULT_CACHE_TTL,
            authorized_ttl: DEFAULT_CACHE_TTL,
            unauthorized_ttl: DEFAULT_CACHE_TTL,
            always_allow: AlwaysAllowPaths::parse(&DEFAULT_ALWAYS_ALLOW_PATHS.map(str::to_owned))
                .unwrap(),
            client_certificates: None,
        }
    }

    fn new_gate(options: GateOptions) -> (Gate, Arc<FakeReviews>) {
        let fake = Arc::new(FakeReviews::default());
        (Gate::new(options, fake.clone()), fake)
    }

    fn headers(token: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(token) = token {
            headers.insert(
                AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
            );
        }
        headers
    }

    /// The status and body of the gate's answer, 200 when it lets the request through.
    async fn answer(gate: &Gate, method: Method, path: &str, token: Option<&str>) -> (u16, String) {
        let uri: Uri = path.parse().unwrap();
        match gate
            .admit(&method, &uri, &headers(token), &[], &ReviewBudget::new(64))
            .await
        {
            Ok(_) => (200, String::new()),
            Err(response) => {
                let status = response.status().as_u16();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                (status, String::from_utf8(body.to_vec()).unwrap())
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn decisions_as_kube_controller_manager() {
        let (gate, _) = new_gate(options());
        let cases: &[(&str, Option<&str>, u16)] = &[
            ("/metrics", Some(ALLOWED), 200),
            ("/metrics", Some(NOT_ALLOWED), 403),
            ("/metrics", Some("garbage"), 401),
            ("/metrics", None, 403),
            ("/metrics", Some(MASTER), 200),
            ("/debug/cache", Some(ALLOWED), 403),
            ("/healthz", None, 200),
            ("/readyz", None, 200),
            ("/livez", Some(NOT_ALLOWED), 200),
            // Authentication comes first, on every path.
            ("/healthz", Some("garbage"), 401),
        ];
        for (path, token, want) in cases {
            let (status, body) = answer(&gate, Method::GET, path, *token).await;
            assert_eq!(status, *want, "{path} with {token:?}: {body}");
        }
        let (_, body) = answer(&gate, Method::GET, "/metrics", None).await;
        assert_eq!(
            body,
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"forbidden: User \\\"system:anonymous\\\" cannot get path \\\"/metrics\\\"\",\
             \"reason\":\"Forbidden\",\"details\":{},\"code\":403}\n"
        );
        let (_, body) = answer(&gate, Method::GET, "/metrics", Some("garbage")).await;
        assert_eq!(
            body,
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"Unauthorized\",\"reason\":\"Unauthorized\",\"code\":401}\n"
        );
        // The verb is the method in lower case: the allowed token may get, not post.
        let (status, body) = answer(&gate, Method::POST, "/metrics", Some(ALLOWED)).await;
        assert_eq!(status, 403);
        assert!(body.contains("cannot post path"), "{body}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_api_server_never_lets_a_request_through() {
        let (gate, fake) = new_gate(options());
        fake.failing.store(true, Ordering::SeqCst);
        // A token cannot be reviewed: 401; no token: authorization cannot be reviewed: 500.
        let (status, _) = answer(&gate, Method::GET, "/metrics", Some(ALLOWED)).await;
        assert_eq!(status, 401);
        let (status, body) = answer(&gate, Method::GET, "/metrics", None).await;
        assert_eq!(status, 500, "{body}");
        assert!(
            body.starts_with("Internal Server Error: \"/metrics\": creating a SubjectAccessReview"),
            "{body}"
        );
        // Retried five times each before giving up.
        assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 5);
        assert_eq!(fake.access_reviews.load(Ordering::SeqCst), 5);
        // A refused connection is not retried.
        fake.failing.store(false, Ordering::SeqCst);
        fake.refusing.store(true, Ordering::SeqCst);
        let (status, _) = answer(&gate, Method::GET, "/metrics", Some(NOT_ALLOWED)).await;
        assert_eq!(status, 401);
        assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 6);
        fake.refusing.store(false, Ordering::SeqCst);
        fake.failing.store(true, Ordering::SeqCst);
        // The probes' paths still answer for anonymous requests.
        let (status, _) = answer(&gate, Method::GET, "/healthz", None).await;
        assert_eq!(status, 200);
        // Failures are not cached: the API server back, the next request succeeds.
        fake.failing.store(false, Ordering::SeqCst);
        let (status, _) = answer(&gate, Method::GET, "/metrics", Some(ALLOWED)).await;
        assert_eq!(status, 200);
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_cached_for_their_ttl() {
        let mut opts = options();
        opts.token_cache_ttl = Duration::from_secs(10);
        opts.authorized_ttl = Duration::from_secs(10);
        opts.unauthorized_ttl = Duration::from_secs(3);
        let (gate, fake) = new_gate(opts);
        let reviews = |fake: &FakeReviews| {
            (
                fake.token_reviews.load(Ordering::SeqCst),
                fake.access_reviews.load(Ordering::SeqCst),
            )
        };
        assert_eq!(
            answer(&gate, Method::GET, "/metrics", Some(ALLOWED))
                .await
                .0,
            200
        );
        assert_eq!(
            answer(&gate, Method::GET, "/metrics", Some(ALLOWED))
                .await
                .0,
            200
        );
        assert_eq!(reviews(&fake), (1, 1));
        assert_eq!(answer(&gate, Method::GET, "/metrics", None).await.0, 403);
        assert_eq!(reviews(&fake), (1, 2));
        tokio::time::advance(Duration::from_secs(4)).await;
        // The denial (3 s) expired, the allowance (10 s) did not.
        assert_eq!(answer(&gate, Method::GET, "/metrics", None).await.0, 403);
        assert_eq!(
            answer(&gate, Method::GET, "/metrics", Some(ALLOWED))
                .await
                .0,
            200
        );
        assert_eq!(reviews(&fake), (1, 3));
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(
            answer(&gate, Method::GET, "/metrics", Some(ALLOWED))
                .await
                .0,
            200
        );
        assert_eq!(reviews(&fake), (2, 4));
        // An invalid token's answer is cached too (it carried no error).
        assert_eq!(
            answer(&gate, Method::GET, "/metrics", Some("garbage"))
                .await
                .0,
            401
        );
        assert_eq!(
            answer(&gate, Method::GET, "/metrics", Some("garbage"))
                .await
                .0,
            401
        );
        assert_eq!(reviews(&fake), (3, 4));
        // A TTL of 0 turns a cache off.
        let mut opts = options();
        opts.token_cache_ttl = Duration::ZERO;
        opts.authorized_ttl = Duration::ZERO;
        let (gate, fake) = new_gate(opts);
        assert_eq!(
            answer(&gate, Method::GET, "/metrics", Some(ALLOWED))
                .await
                .0,
            200
        );
        assert_eq!(
            answer(&gate, Method::GET, "/metrics", Some(ALLOWED))
                .await
                .0,
            200
        );
        assert_eq!(reviews(&fake), (2, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn without_review_clients_everyone_is_anonymous_and_only_the_listed_paths_open() {
        let mut opts = options();
        opts.review_tokens = false;
        opts.review_access = false;
        let (gate, fake) = new_gate(opts);
        assert_eq!(
            answer(&gate, Method::GET, "/metrics", Some(ALLOWED))
                .await
                .0,
            403
        );
        assert_eq!(
            answer(&gate, Method::GET, "/metrics", Some("garbage"))
                .await
                .0,
            403
        );
        assert_eq!(
            answer(&gate, Method::GET, "/healthz", Some("garbage"))
                .await
                .0,
            200
        );
        assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 0);
        assert_eq!(fake.access_reviews.load(Ordering::SeqCst), 0);
    }

    // A bearer token longer than any real one is refused (401) without a TokenReview, so
    // junk headers cost the API server nothing; one of exactly the limit is still reviewed.
    #[tokio::test(start_paused = true)]
    async fn an_overlong_bearer_token_is_refused_without_a_review() {
        let (gate, fake) = new_gate(options());
        let at_limit = "a".repeat(16 * 1024);
        let (status, _) = answer(&gate, Method::GET, "/metrics", Some(&at_limit)).await;
        assert_eq!(status, 401);
        assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 1);
        for len in [16 * 1024 + 1, 300 * 1024] {
            let token = "b".repeat(len);
            let (status, body) = answer(&gate, Method::GET, "/metrics", Some(&token)).await;
            assert_eq!(status, 401, "{body}");
            // Not even on the always-allowed paths: the credential is refused.
            let (status, _) = answer(&gate, Method::GET, "/healthz", Some(&token)).await;
            assert_eq!(status, 401);
        }
        assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 1);
    }

    // Many requests with one token while its review is pending: one TokenReview answers
    // them all (and fills the cache for the next).
    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_with_one_token_share_one_review() {
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let fake = Arc::new(FakeReviews {
            token_release: Some(release.clone()),
            ..FakeReviews::default()
        });
        let gate = Arc::new(Gate::new(options(), fake.clone()));
        let requests: Vec<_> = (0..10)
            .map(|_| {
                let gate = gate.clone();
                tokio::spawn(
                    async move { answer(&gate, Method::GET, "/metrics", Some(ALLOWED)).await },
                )
            })
            .collect();
        // Every request has run as far as it can (the clock only advances once all wait).
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 1);
        release.add_permits(100);
        for request in requests {
            assert_eq!(request.await.unwrap().0, 200);
        }
        assert_eq!(
            answer(&gate, Method::GET, "/metrics", Some(ALLOWED))
                .await
                .0,
            200
        );
        assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 1);
    }

    // While as many requests as the budget allows wait on reviews, another one that needs a
    // review (of its token, or of its access) is answered 429 at once; one that needs none
    // (a probe) is answered as usual. The slots free up with the answers.
    #[tokio::test(start_paused = true)]
    async fn requests_past_the_review_budget_are_turned_away_and_probes_are_not() {
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let fake = Arc::new(FakeReviews {
            token_release: Some(release.clone()),
            ..FakeReviews::default()
        });
        let gate = Arc::new(Gate::new(options(), fake.clone()));
        let budget = ReviewBudget::new(1);
        let status = |response: Result<UserInfo, Response<Full<Bytes>>>| {
            response.map_or_else(|r| r.status().as_u16(), |_| 200)
        };
        let waiting = {
            let (gate, budget) = (gate.clone(), budget.clone());
            tokio::spawn(async move {
                let uri: Uri = "/metrics".parse().unwrap();
                let answer = gate
                    .admit(&Method::GET, &uri, &headers(Some(ALLOWED)), &[], &budget)
                    .await;
                answer.map_or_else(|r| r.status().as_u16(), |_| 200)
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let admit = |path: &str, token: Option<&str>| {
            let uri: Uri = path.parse().unwrap();
            let (gate, budget) = (gate.clone(), budget.clone());
            let headers = headers(token);
            async move { gate.admit(&Method::GET, &uri, &headers, &[], &budget).await }
        };
        let busy = admit("/metrics", Some(NOT_ALLOWED)).await.unwrap_err();
        assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(busy.headers()[hyper::header::RETRY_AFTER], "1");
        assert_eq!(status(admit("/metrics", None).await), 429);
        assert_eq!(status(admit("/healthz", None).await), 200);
        assert_eq!(status(admit("/readyz", None).await), 200);
        release.add_permits(10);
        assert_eq!(waiting.await.unwrap(), 200);
        assert_eq!(status(admit("/metrics", Some(NOT_ALLOWED)).await), 403);
        // Answers from the cache need no slot.
        assert_eq!(status(admit("/metrics", Some(ALLOWED)).await), 200);
        assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn bearer_tokens_are_read_as_upstream_reads_them() {
        let with = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            bearer_token(&h).map(str::to_owned)
        };
        assert_eq!(with("Bearer abc"), Some("abc".to_owned()));
        assert_eq!(with("bearer abc"), Some("abc".to_owned()));
        assert_eq!(with("  Bearer abc  "), Some("abc".to_owned()));
        assert_eq!(with("Bearer abc def"), Some("abc".to_owned()));
        assert_eq!(with("Bearer  abc"), None);
        assert_eq!(with("Bearer"), None);
        assert_eq!(with("Basic abc"), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[test]
    fn always_allow_paths_match_exactly_or_by_trailing_star() {
        let paths = AlwaysAllowPaths::parse(&[
            "/healthz".to_owned(),
            "/debug/*".to_owned(),
            "/".to_owned(),
        ])
        .unwrap();
        assert!(paths.allows("/healthz"));
        assert!(!paths.allows("/healthz/ping"));
        assert!(paths.allows("/debug/cache"));
        assert!(paths.allows("/"));
        assert!(!paths.allows("/metrics"));
        let err = AlwaysAllowPaths::parse(&["/a*b".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("only a trailing *"), "{err}");
        assert!(AlwaysAllowPaths::parse(&["/a**".to_owned()]).is_err());
    }
}
