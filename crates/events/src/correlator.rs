//! The event correlator: what keeps a busy controller from flooding the API with Events
//! (client-go's `EventCorrelator`, `events_cache.go`). Every event passes three stages:
//!
//! 1. **Aggregation.** Events that differ only in their message (same source, object, type,
//!    reason and reporting fields) are counted per group; once [`CorrelatorOptions::max_events`]
//!    distinct messages arrived within [`CorrelatorOptions::max_interval`] of each other, further
//!    new messages in the group are replaced by one aggregate event whose message is
//!    `"(combined from similar events): <latest message>"`.
//! 2. **De-duplication.** An event identical to one seen before (same key, message included)
//!    reuses the earlier event's name and first timestamp with its count plus one, and comes
//!    with a strategic-merge patch of `count`, `lastTimestamp` and `message` so the writer
//!    updates the existing object instead of creating another.
//! 3. **Spam filtering.** Each source + object (+ type) has a token bucket: a burst of
//!    [`CorrelatorOptions::burst_size`] events, refilled at [`CorrelatorOptions::qps`] (one
//!    token per 5 minutes by default); an event finding the bucket empty is skipped.
//!
//! All state lives in LRU caches of [`CorrelatorOptions::lru_cache_size`] entries each. The
//! correlator is owned by one sink's writer task, so it needs no locking.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::{Map, Value};

use crate::error::Error;
use crate::event::{hex, unix_nanos};
use crate::lru::Lru;
use crate::{Clock, SystemClock};

/// Default size of each correlator cache.
pub const DEFAULT_LRU_CACHE_SIZE: usize = 4096;
/// Default number of distinct similar messages that triggers aggregation.
pub const DEFAULT_AGGREGATE_MAX_EVENTS: usize = 10;
/// Default window in which similar events count towards aggregation.
pub const DEFAULT_AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// Default spam-filter burst per source and object.
pub const DEFAULT_SPAM_BURST: u32 = 25;
/// Default spam-filter refill rate: one event per 300 seconds.
pub const DEFAULT_SPAM_QPS: f64 = 1.0 / 300.0;

/// Prefix of an aggregate event's message.
pub const AGGREGATE_MESSAGE_PREFIX: &str = "(combined from similar events): ";

/// Groups events for aggregation: `(aggregate key, local key)`. Events with the same
/// aggregate key are similar; the local key tells them apart.
pub type AggregatorKeyFn = Arc<dyn Fn(&Event) -> (String, String) + Send + Sync>;
/// Produces an aggregate event's message from the event that triggered it.
pub type AggregatorMessageFn = Arc<dyn Fn(&Event) -> String + Send + Sync>;
/// The key the spam filter's token buckets are kept under.
pub type SpamKeyFn = Arc<dyn Fn(&Event) -> String + Send + Sync>;

/// Joins key parts with a separator that cannot occur in names, so that different parts never
/// run together into the same key.
fn join_key(parts: &[&str]) -> String {
    parts.join("\u{0}")
}

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

fn source_parts(e: &Event) -> (&str, &str) {
    e.source
        .as_ref()
        .map(|src| (s(&src.component), s(&src.host)))
        .unwrap_or(("", ""))
}

/// The key under which identical events are counted: source, involved object (including
/// its field path), type, reason and message.
pub fn event_key(e: &Event) -> String {
    let (component, host) = source_parts(e);
    let o = &e.involved_object;
    join_key(&[
        component,
        host,
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.field_path),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
        s(&e.reason),
        s(&e.message),
    ])
}

/// The default spam key: source, involved object (without field path) and type.
pub fn spam_key(e: &Event) -> String {
    let (component, host) = source_parts(e);
    let o = &e.involved_object;
    join_key(&[
        component,
        host,
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
    ])
}

/// The default aggregation grouping (client-go's `EventAggregatorByReasonFunc`): events are
/// similar when source, involved object (without field path), type, reason and reporting
/// component/instance match; the message is the local key.
pub fn aggregate_by_reason(e: &Event) -> (String, String) {
    let (component, host) = source_parts(e);
    let o = &e.involved_object;
    let aggregate = join_key(&[
        component,
        host,
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
        s(&e.reason),
        s(&e.reporting_component),
        s(&e.reporting_instance),
    ]);
    (aggregate, s(&e.message).to_owned())
}

/// The default aggregate message (client-go's `EventAggregatorByReasonMessageFunc`):
/// `"(combined from similar events): <message>"`.
pub fn aggregate_by_reason_message(e: &Event) -> String {
    format!("{AGGREGATE_MESSAGE_PREFIX}{}", s(&e.message))
}

/// Correlator settings (client-go's `CorrelatorOptions`). Zero and `None` mean "the
/// default", as upstream's zero values do.
#[derive(Clone, Default)]
pub struct CorrelatorOptions {
    /// Entries in each cache; 0 → [`DEFAULT_LRU_CACHE_SIZE`].
    pub lru_cache_size: usize,
    /// Spam-filter burst per key; 0 → [`DEFAULT_SPAM_BURST`].
    pub burst_size: u32,
    /// Spam-filter refill in events per second; 0 → [`DEFAULT_SPAM_QPS`]. Must be finite and
    /// not negative.
    pub qps: f64,
    /// Aggregation grouping; `None` → [`aggregate_by_reason`].
    pub key_fn: Option<AggregatorKeyFn>,
    /// Aggregate message; `None` → [`aggregate_by_reason_message`].
    pub message_fn: Option<AggregatorMessageFn>,
    /// Distinct similar messages that trigger aggregation; 0 → [`DEFAULT_AGGREGATE_MAX_EVENTS`].
    pub max_events: usize,
    /// How long after the last similar event a new one still counts towards aggregation;
    /// zero → [`DEFAULT_AGGREGATE_INTERVAL`].
    pub max_interval: Duration,
    /// Time source; `None` → [`SystemClock`].
    pub clock: Option<Arc<dyn Clock>>,
    /// Spam-filter key; `None` → [`spam_key`].
    pub spam_key_fn: Option<SpamKeyFn>,
}

impl fmt::Debug for CorrelatorOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CorrelatorOptions")
            .field("lru_cache_size", &self.lru_cache_size)
            .field("burst_size", &self.burst_size)
            .field("qps", &self.qps)
            .field("key_fn", &self.key_fn.as_ref().map(|_| "custom"))
            .field("message_fn", &self.message_fn.as_ref().map(|_| "custom"))
            .field("max_events", &self.max_events)
            .field("max_interval", &self.max_interval)
            .field("clock", &self.clock)
            .field("spam_key_fn", &self.spam_key_fn.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl CorrelatorOptions {
    /// Checks the options, naming the first one out of range.
    pub fn validate(&self) -> Result<(), Error> {
        if !self.qps.is_finite() || self.qps < 0.0 {
            return Err(Error::InvalidOption {
                option: "CorrelatorOptions::qps",
                reason: format!(
                    "{} is not a rate: use a finite number of events per second, or 0 for \
                     the default (1/300)",
                    self.qps
                ),
            });
        }
        Ok(())
    }
}

/// The outcome of correlating one event.
#[derive(Clone, Debug, PartialEq)]
pub enum Correlation {
    /// The spam filter dropped the event: write nothing.
    Skip,
    /// Write this event: create it, or, when `event.count > 1`, patch the existing one with
    /// `patch` (a strategic-merge patch of `count`, `lastTimestamp` and `message`).
    Write {
        /// The event to write (possibly an aggregate, possibly renamed to an earlier one).
        event: Box<Event>,
        /// The patch for an existing event, when this repeats one.
        patch: Option<Value>,
    },
}

/// Filters, aggregates and counts events before they are written (see the module docs).
pub struct EventCorrelator {
    clock: Arc<dyn Clock>,
    aggregator: Aggregator,
    logger: Lru<Observation>,
    spam: SpamFilter,
}

impl fmt::Debug for EventCorrelator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventCorrelator")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl EventCorrelator {
    /// A correlator with client-go's defaults and the system clock.
    pub fn new() -> Self {
        Self::build(CorrelatorOptions::default())
    }

    /// A correlator with these options (zero values take the defaults).
    pub fn with_options(options: CorrelatorOptions) -> Result<Self, Error> {
        options.validate()?;
        Ok(Self::build(options))
    }

    fn build(o: CorrelatorOptions) -> Self {
        let size = if o.lru_cache_size == 0 {
            DEFAULT_LRU_CACHE_SIZE
        } else {
            o.lru_cache_size
        };
        let clock = o.clock.unwrap_or_else(|| Arc::new(SystemClock));
        Self {
            aggregator: Aggregator {
                cache: Lru::new(size),
                key_fn: o.key_fn.unwrap_or_else(|| Arc::new(aggregate_by_reason)),
                message_fn: o
                    .message_fn
                    .unwrap_or_else(|| Arc::new(aggregate_by_reason_message)),
                max_events: if o.max_events == 0 {
                    DEFAULT_AGGREGATE_MAX_EVENTS
                } else {
                    o.max_events
                },
                max_interval: if o.max_interval.is_zero() {
                    DEFAULT_AGGREGATE_INTERVAL
                } else {
                    o.max_interval
                },
            },
            logger: Lru::new(size),
            spam: SpamFilter {
                cache: Lru::new(size),
                burst: if o.burst_size == 0 {
                    DEFAULT_SPAM_BURST
                } else {
                    o.burst_size
                },
                qps: if o.qps == 0.0 {
                    DEFAULT_SPAM_QPS
                } else {
                    o.qps
                },
                key_fn: o.spam_key_fn.unwrap_or_else(|| Arc::new(spam_key)),
            },
            clock,
        }
    }

    /// Runs `event` through aggregation, de-duplication and the spam filter.
    pub fn correlate(&mut self, event: &Event) -> Correlation {
        let (aggregated, key) = self.aggregator.aggregate(event, self.clock.now());
        let (observed, patch) = self.observe(aggregated, key);
        if self.spam.is_spam(&observed, self.clock.now()) {
            return Correlation::Skip;
        }
        Correlation::Write {
            event: Box::new(observed),
            patch,
        }
    }

    /// Records what the server returned for a written event (its name, resourceVersion and
    /// count), so the next repeat patches the right object.
    pub fn update_state(&mut self, written: &Event) {
        self.logger
            .insert(event_key(written), Observation::of(written));
    }

    /// De-duplication: an event seen before under `key` becomes a repeat of it.
    fn observe(&mut self, mut event: Event, key: String) -> (Event, Option<Value>) {
        let mut patch = None;
        if let Some(last) = self.logger.get(&key).filter(|o| o.count > 0) {
            event.metadata.name = last.name.clone();
            event.metadata.resource_version = last.resource_version.clone();
            event.first_timestamp = last.first_timestamp.clone();
            event.count = Some(last.count.saturating_add(1));
            patch = Some(repeat_patch(&event));
        }
        self.logger.insert(key, Observation::of(&event));
        (event, patch)
    }
}

impl Default for EventCorrelator {
    fn default() -> Self {
        Self::new()
    }
}

/// The patch that turns the stored copy of a repeated event into `event`: every field that
/// changes between repeats, i.e. `count`, `lastTimestamp` and `message` (those of them that
/// are set).
fn repeat_patch(event: &Event) -> Value {
    let mut patch = Map::new();
    if let Some(c) = event.count.filter(|&c| c != 0) {
        patch.insert("count".into(), Value::from(c));
    }
    // The stored copy is compared with an epoch lastTimestamp, as upstream does.
    match &event.last_timestamp {
        Some(t) if t.0 != Timestamp::UNIX_EPOCH => {
            patch.insert(
                "lastTimestamp".into(),
                serde_json::to_value(t).unwrap_or(Value::Null),
            );
        }
        Some(_) => {}
        None => {
            patch.insert("lastTimestamp".into(), Value::Null);
        }
    }
    if let Some(m) = event.message.as_deref().filter(|m| !m.is_empty()) {
        patch.insert("message".into(), Value::from(m));
    }
    Value::Object(patch)
}

/// What the de-duplicator remembers of an event.
#[derive(Clone, Debug)]
struct Observation {
    count: i32,
    first_timestamp: Option<Time>,
    name: Option<String>,
    resource_version: Option<String>,
}

impl Observation {
    fn of(e: &Event) -> Self {
        Self {
            count: e.count.unwrap_or(0),
            first_timestamp: e.first_timestamp.clone(),
            name: e.metadata.name.clone(),
            resource_version: e.metadata.resource_version.clone(),
        }
    }
}

struct Aggregator {
    cache: Lru<AggregateRecord>,
    key_fn: AggregatorKeyFn,
    message_fn: AggregatorMessageFn,
    max_events: usize,
    max_interval: Duration,
}

#[derive(Clone, Debug)]
struct AggregateRecord {
    local_keys: HashSet<String>,
    last: Timestamp,
}

impl Aggregator {
    /// Returns the event to go on with and the key to de-duplicate it under: the event itself
    /// and its full key, or an aggregate event and the group's key.
    fn aggregate(&mut self, event: &Event, now: Timestamp) -> (Event, String) {
        let (aggregate_key, local_key) = (self.key_fn)(event);
        let max_interval =
            SignedDuration::try_from(self.max_interval).unwrap_or(SignedDuration::MAX);
        let stale = self
            .cache
            .get(&aggregate_key)
            .is_none_or(|r| now.duration_since(r.last) > max_interval);
        if stale {
            self.cache.insert(
                aggregate_key.clone(),
                AggregateRecord {
                    local_keys: HashSet::new(),
                    last: now,
                },
            );
        }
        let Some(record) = self.cache.get(&aggregate_key) else {
            return (event.clone(), event_key(event));
        };
        record.local_keys.insert(local_key);
        record.last = now;
        if record.local_keys.len() < self.max_events {
            return (event.clone(), event_key(event));
        }
        // Keep the set at most max_events - 1 long by forgetting one of its keys chosen at
        // random, as upstream's `PopAny` does (Go starts a map's iteration at a random place):
        // usually an older message, so the new one, repeated later, goes out on its own event;
        // sometimes the new one itself.
        let forget = fastrand::usize(..record.local_keys.len());
        if let Some(key) = record.local_keys.iter().nth(forget).cloned() {
            record.local_keys.remove(&key);
        }
        let aggregate = Event {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{}",
                    s(&event.involved_object.name),
                    hex(unix_nanos(now))
                )),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            count: Some(1),
            first_timestamp: Some(Time(now)),
            involved_object: event.involved_object.clone(),
            last_timestamp: Some(Time(now)),
            message: Some((self.message_fn)(event)),
            type_: event.type_.clone(),
            reason: event.reason.clone(),
            source: event.source.clone(),
            ..Default::default()
        };
        (aggregate, aggregate_key)
    }
}

struct SpamFilter {
    cache: Lru<TokenBucket>,
    burst: u32,
    qps: f64,
    key_fn: SpamKeyFn,
}

impl SpamFilter {
    fn is_spam(&mut self, event: &Event, now: Timestamp) -> bool {
        let key = (self.key_fn)(event);
        let accepted = match self.cache.get(&key) {
            Some(bucket) => bucket.try_take(now, self.qps, self.burst),
            None => {
                let mut bucket = TokenBucket::full(self.burst);
                let accepted = bucket.try_take(now, self.qps, self.burst);
                self.cache.insert(key, bucket);
                accepted
            }
        };
        !accepted
    }
}

/// A token bucket on an external clock: starts full, refills continuously at `qps` up to
/// `burst`, one token per accepted event.
#[derive(Clone, Debug)]
struct TokenBucket {
    tokens: f64,
    last: Option<Timestamp>,
}

impl TokenBucket {
    fn full(burst: u32) -> Self {
        Self {
            tokens: f64::from(burst),
            last: None,
        }
    }

    fn try_take(&mut self, now: Timestamp, qps: f64, burst: u32) -> bool {
        if let Some(last) = self.last {
            // A clock that went backwards refills nothing.
            let elapsed = now.duration_since(last).as_secs_f64().max(0.0);
            self.tokens = (self.tokens + elapsed * qps).min(f64::from(burst));
        }
        self.last = Some(self.last.map_or(now, |l| l.max(now)));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
#[path = "correlator_tests.rs"]
mod tests;
