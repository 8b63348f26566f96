//! Shard selectors: server-side sharded list and watch (KEP-5866).
//!
//! A kube-apiserver with the alpha feature gate `ShardedListAndWatch` enabled
//! (`--feature-gates=ShardedListAndWatch=true`; off by default in 1.36 and 1.37) filters
//! lists and watches by a *shard selector*: the object's UID or namespace is hashed with
//! 64-bit FNV-1a ([`hash_field`]) and the object is returned when the hash falls in one of
//! the selector's ranges. Several controller replicas can so split one resource between
//! them, each caching and reconciling its own part, without labelling the objects.
//!
//! The selector is sent as the `shardSelector` parameter of a list or watch
//! ([`ListParams::shard_selector`](crate::ListParams::shard_selector),
//! [`WatchParams::shard_selector`](crate::WatchParams::shard_selector)) in the apiserver's
//! expression syntax, which [`ShardSelector`]'s `Display` writes and its `FromStr` reads:
//!
//! ```text
//! shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(...)
//! ```
//!
//! A list the server filtered says so in `metadata.shardInfo` ([`ShardInfo`], read with
//! [`Api::list_sharded`](crate::Api::list_sharded)); a server without the gate ignores the
//! parameter and returns everything, so a client that needs the subset must filter the
//! answer itself with [`ShardSelector::matches`].
//!
//! ```
//! use kctrl_client::sharding::{HashRange, ShardField, ShardSelector};
//!
//! // The lower half of the UID hash space.
//! let low = ShardSelector::new(ShardField::Uid, [HashRange::new(0, 1 << 63)?])?;
//! assert_eq!(
//!     low.to_string(),
//!     "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
//! );
//! // What a flag or a config file holds parses back to the same selector.
//! let parsed: ShardSelector = low.to_string().parse()?;
//! assert_eq!(parsed, low);
//! assert!(low.matches_hash(0x7fff_ffff_ffff_ffff));
//! assert!(!low.matches_hash(0x8000_0000_0000_0000));
//! # Ok::<(), kctrl_client::sharding::ShardSelectorError>(())
//! ```

use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use k8s_openapi::{List, ListableResource};

use crate::object_meta::ObjectMetaAccess;

/// The exclusive end of the hash space, 2^64.
const SPACE_END: u128 = 1 << 64;

/// The 64-bit FNV-1a offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// The 64-bit FNV prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The 64-bit FNV-1a hash of `value`'s UTF-8 bytes: the hash the apiserver places an object
/// by (apimachinery's `sharding.HashField`, which prints it as 16 hex digits).
///
/// ```
/// assert_eq!(kctrl_client::sharding::hash_field("default"), 0xebad_a516_8620_c5fe);
/// ```
pub fn hash_field(value: &str) -> u64 {
    value.bytes().fold(FNV_OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// The field of an object a shard selector hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ShardField {
    /// `object.metadata.uid`: objects spread evenly, each placed independently.
    Uid,
    /// `object.metadata.namespace`: a namespace's objects stay together (cluster-scoped
    /// objects hash the empty string and so all land in one place).
    Namespace,
}

impl ShardField {
    /// The field path as the apiserver spells it (`object.metadata.uid`,
    /// `object.metadata.namespace`; not the field-selector spelling).
    pub fn path(self) -> &'static str {
        match self {
            ShardField::Uid => "object.metadata.uid",
            ShardField::Namespace => "object.metadata.namespace",
        }
    }

    /// The field's value in `meta`, `None` when the object does not have it (a
    /// cluster-scoped object's namespace, an object not yet created's UID). The apiserver
    /// hashes a missing value as the empty string; [`ShardSelector::matches`] does the same.
    pub fn value_of<M: ObjectMetaAccess + ?Sized>(self, meta: &M) -> Option<&str> {
        match self {
            ShardField::Uid => meta.uid(),
            ShardField::Namespace => meta.namespace(),
        }
    }

    /// The field of a path, `None` for any the apiserver does not support.
    pub fn from_path(path: &str) -> Option<Self> {
        match path {
            "object.metadata.uid" => Some(ShardField::Uid),
            "object.metadata.namespace" => Some(ShardField::Namespace),
            _ => None,
        }
    }
}

impl fmt::Display for ShardField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path())
    }
}

/// Why a shard selector, range or bound is not valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardSelectorError {
    /// The expression is empty.
    #[error(
        "empty shard selector: write at least one shardRange(...), or leave the selector unset \
         for everything"
    )]
    Empty,
    /// A selector with no range would match nothing.
    #[error(
        "a shard selector needs at least one hash range (a selector matching nothing cannot be \
         sent; leave it unset, or stop the informer)"
    )]
    NoRanges,
    /// The range is empty or reversed.
    #[error("shard range start {start} must be less than end {end}")]
    EmptyRange {
        /// The start, as written.
        start: String,
        /// The end, as written.
        end: String,
    },
    /// The end lies past the hash space.
    #[error(
        "shard range end {end:#x} is past the end of the hash space (the largest end is \
         0x10000000000000000, 2^64)"
    )]
    EndTooLarge {
        /// The end given.
        end: u128,
    },
    /// A bound is not a literal the apiserver accepts.
    #[error("{which}: {problem}")]
    Bound {
        /// `hexStart` or `hexEnd`, as the apiserver names them.
        which: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A field path the apiserver does not shard by.
    #[error(
        "unsupported shard field {0:?}; supported: object.metadata.uid, object.metadata.namespace"
    )]
    UnsupportedField(String),
    /// A function other than `shardRange`.
    #[error("unsupported function {0:?}; only shardRange() and || are allowed")]
    UnsupportedFunction(String),
    /// `shardRange` with other than three arguments.
    #[error("shardRange() requires exactly 3 arguments (field, hexStart, hexEnd), got {0}")]
    ArgumentCount(usize),
    /// Ranges over different fields.
    #[error("all shard ranges must use the same field, got {first:?} and {other:?}")]
    MixedFields {
        /// The first range's field.
        first: String,
        /// A later range's field.
        other: String,
    },
    /// The expression cannot be read.
    #[error("shard selector {expression:?}, at byte {offset}: {problem}")]
    Syntax {
        /// The whole expression.
        expression: String,
        /// Where reading stopped.
        offset: usize,
        /// What was expected.
        problem: String,
    },
}

/// A half-open range `[start, end)` of the 64-bit hash space; `end` may be 2^64, the end of
/// the space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HashRange {
    start: u64,
    end: u128,
}

impl HashRange {
    /// The whole hash space, `[0, 2^64)`.
    pub const FULL: HashRange = HashRange {
        start: 0,
        end: SPACE_END,
    };

    /// The range `[start, end)`; `end` at most 2^64 and greater than `start`.
    pub fn new(start: u64, end: u128) -> Result<Self, ShardSelectorError> {
        if end > SPACE_END {
            return Err(ShardSelectorError::EndTooLarge { end });
        }
        if u128::from(start) >= end {
            return Err(ShardSelectorError::EmptyRange {
                start: format_bound(u128::from(start)),
                end: format_bound(end),
            });
        }
        Ok(Self { start, end })
    }

    /// The inclusive start.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The exclusive end (2^64 for a range reaching the end of the space).
    pub fn end(&self) -> u128 {
        self.end
    }

    /// How many hash values the range holds.
    pub fn len(&self) -> u128 {
        self.end - u128::from(self.start)
    }

    /// Always false: a range holds at least one value.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `hash` lies in the range.
    pub fn contains(&self, hash: u64) -> bool {
        hash >= self.start && u128::from(hash) < self.end
    }

    /// The range `[start, end)` without the checks of [`new`](Self::new), for callers that
    /// have made them.
    fn raw(start: u128, end: u128) -> Self {
        debug_assert!(start < end && end <= SPACE_END);
        Self {
            start: start as u64,
            end,
        }
    }
}

impl fmt::Display for HashRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}, {})",
            format_bound(u128::from(self.start)),
            format_bound(self.end)
        )
    }
}

/// A bound as the apiserver wants it: `0x` and 16 lowercase hex digits, or
/// `0x10000000000000000` for 2^64.
fn format_bound(value: u128) -> String {
    if value >= SPACE_END {
        "0x10000000000000000".to_owned()
    } else {
        format!("0x{value:016x}")
    }
}

/// A set of hash ranges over one field: which objects a sharded list or watch returns.
///
/// The ranges are kept sorted, with overlapping and adjacent ranges merged, so two
/// selectors covering the same hashes are equal and write the same expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShardSelector {
    field: ShardField,
    ranges: Vec<HashRange>,
}

impl ShardSelector {
    /// A selector of the objects whose `field` hashes into any of `ranges`; fails when
    /// `ranges` is empty (such a selector would match nothing, and the apiserver has no way
    /// to say so).
    pub fn new(
        field: ShardField,
        ranges: impl IntoIterator<Item = HashRange>,
    ) -> Result<Self, ShardSelectorError> {
        let ranges = normalise(ranges.into_iter().collect());
        if ranges.is_empty() {
            return Err(ShardSelectorError::NoRanges);
        }
        Ok(Self { field, ranges })
    }

    /// The whole hash space of `field`: matches every object (the server still filters, and
    /// still reports shardInfo).
    pub fn full(field: ShardField) -> Self {
        Self {
            field,
            ranges: vec![HashRange::FULL],
        }
    }

    /// The field hashed.
    pub fn field(&self) -> ShardField {
        self.field
    }

    /// The ranges, sorted, disjoint and not adjacent.
    pub fn ranges(&self) -> &[HashRange] {
        &self.ranges
    }

    /// Whether the selector covers the whole hash space.
    pub fn is_full(&self) -> bool {
        self.ranges == [HashRange::FULL]
    }

    /// Whether `hash` lies in one of the ranges.
    pub fn matches_hash(&self, hash: u64) -> bool {
        // Sorted and disjoint: the candidate is the last range starting at or below `hash`.
        let after = self.ranges.partition_point(|r| r.start <= hash);
        after > 0 && self.ranges[after - 1].contains(hash)
    }

    /// Whether an object whose field has `value` is selected.
    pub fn matches_value(&self, value: &str) -> bool {
        self.matches_hash(hash_field(value))
    }

    /// Whether the object with metadata `meta` is selected, as the apiserver decides it (a
    /// missing field hashes as the empty string).
    pub fn matches<M: ObjectMetaAccess + ?Sized>(&self, meta: &M) -> bool {
        self.matches_value(self.field.value_of(meta).unwrap_or(""))
    }

    /// The hashes `self` selects and `other` does not, over `self`'s field; `None` when
    /// there are none. With `other` on a different field nothing can be said per hash, and
    /// the whole of `self` is returned.
    pub fn difference(&self, other: &ShardSelector) -> Option<ShardSelector> {
        if other.field != self.field {
            return Some(self.clone());
        }
        let mut out = Vec::new();
        for r in &self.ranges {
            let mut cursor = u128::from(r.start);
            for o in &other.ranges {
                let (o_start, o_end) = (u128::from(o.start), o.end);
                if o_end <= cursor || o_start >= r.end {
                    continue;
                }
                if o_start > cursor {
                    out.push(HashRange::raw(cursor, o_start));
                }
                cursor = cursor.max(o_end);
                if cursor >= r.end {
                    break;
                }
            }
            if cursor < r.end {
                out.push(HashRange::raw(cursor, r.end));
            }
        }
        Self::new(self.field, out).ok()
    }

    /// The hashes either selector selects; `None` when the fields differ.
    pub fn union(&self, other: &ShardSelector) -> Option<ShardSelector> {
        if other.field != self.field {
            return None;
        }
        Self::new(self.field, self.ranges.iter().chain(&other.ranges).copied()).ok()
    }

    /// Whether every hash `other` selects, `self` selects too (same field).
    pub fn contains(&self, other: &ShardSelector) -> bool {
        other.field == self.field && other.difference(self).is_none()
    }
}

/// Sorts `ranges` and merges those that overlap or touch.
fn normalise(mut ranges: Vec<HashRange>) -> Vec<HashRange> {
    ranges.sort_unstable();
    let mut out: Vec<HashRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if u128::from(r.start) <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

impl fmt::Display for ShardSelector {
    /// The expression the apiserver accepts: one `shardRange(field, 'start', 'end')` per
    /// range, joined with ` || `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(" || ")?;
            }
            write!(
                f,
                "shardRange({}, '{}', '{}')",
                self.field.path(),
                format_bound(u128::from(r.start)),
                format_bound(r.end)
            )?;
        }
        Ok(())
    }
}

impl FromStr for ShardSelector {
    type Err = ShardSelectorError;

    /// Reads a selector expression as the apiserver does: `shardRange(field, 'start',
    /// 'end')` calls joined with `||` (parentheses allowed), all on one field, each bound a
    /// quoted `0x` and 16 lowercase hex digits (`'0x10000000000000000'` for the end of the
    /// space). String escapes, which no valid bound needs, are refused.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().is_empty() {
            return Err(ShardSelectorError::Empty);
        }
        let mut parser = Parser {
            text: s,
            tokens: tokenize(s)?,
            next: 0,
        };
        let ranges = parser.or_expr()?;
        if let Some(tok) = parser.peek() {
            return Err(parser.syntax(tok.offset, "expected || or the end of the selector"));
        }
        let field = ranges[0].0;
        if let Some((other, _)) = ranges.iter().find(|(f, _)| *f != field) {
            return Err(ShardSelectorError::MixedFields {
                first: field.path().to_owned(),
                other: other.path().to_owned(),
            });
        }
        Self::new(field, ranges.into_iter().map(|(_, r)| r))
    }
}

/// The information about sharding on a list response (`metadata.shardInfo`): its presence
/// says the server filtered the list by a shard selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Deserialize)]
pub struct ShardInfo {
    /// The selector the server applied, echoed back as it was sent.
    #[serde(default)]
    pub selector: String,
}

/// The shardInfo of a list's metadata. k8s-openapi's `ListMeta` carries it from its 1.36
/// types on; with the types of an older release selected it cannot, and this is always
/// `None` (use [`Api::list_sharded`](crate::Api::list_sharded), which reads it whatever the
/// release).
pub fn shard_info_of(meta: &ListMeta) -> Option<ShardInfo> {
    #[cfg(k8s_api_ge = "1.36")]
    {
        meta.shard_info.as_ref().map(|info| ShardInfo {
            selector: info.selector.clone(),
        })
    }
    #[cfg(not(k8s_api_ge = "1.36"))]
    {
        let _ = meta;
        None
    }
}

/// A list and the shardInfo of its response, which says whether the server filtered it by
/// the shard selector sent ([`Api::list_sharded`](crate::Api::list_sharded)).
#[derive(Clone, Debug, PartialEq)]
pub struct ShardedList<K: ListableResource> {
    /// The list as [`Api::list`](crate::Api::list) returns it.
    pub list: List<K>,
    /// `metadata.shardInfo`: `Some` when the server applied a shard selector, `None` when it
    /// did not (no selector sent, or a server without the `ShardedListAndWatch` feature gate,
    /// which returns every object).
    pub shard_info: Option<ShardInfo>,
}

impl<K: ListableResource> ShardedList<K> {
    /// A list whose shardInfo is read from its metadata ([`shard_info_of`]).
    pub fn from_list(list: List<K>) -> Self {
        let shard_info = shard_info_of(&list.metadata);
        Self { list, shard_info }
    }

    /// Whether the server filtered the list by a shard selector.
    pub fn server_filtered(&self) -> bool {
        self.shard_info.is_some()
    }
}

/// A JSON list's `metadata.shardInfo`, read past everything else (for k8s-openapi releases
/// whose `ListMeta` lacks the field).
#[cfg_attr(k8s_api_ge = "1.36", allow(dead_code))]
pub(crate) fn shard_info_from_json(body: &[u8]) -> serde_json::Result<Option<ShardInfo>> {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default)]
        metadata: Option<HeadMeta>,
    }
    #[derive(serde::Deserialize)]
    struct HeadMeta {
        #[serde(default, rename = "shardInfo")]
        shard_info: Option<ShardInfo>,
    }
    let head: Head = serde_json::from_slice(body)?;
    Ok(head.metadata.and_then(|m| m.shard_info))
}

// ---------------------------------------------------------------------------------------
// The expression reader

#[derive(Clone, Debug, PartialEq)]
enum TokenKind {
    Ident(String),
    Str(String),
    Number(String),
    Dot,
    Comma,
    Open,
    Close,
    Or,
}

#[derive(Clone, Debug)]
struct Token {
    kind: TokenKind,
    offset: usize,
}

fn syntax_error(text: &str, offset: usize, problem: impl Into<String>) -> ShardSelectorError {
    ShardSelectorError::Syntax {
        expression: text.to_owned(),
        offset,
        problem: problem.into(),
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, ShardSelectorError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let offset = i;
        let kind = match c {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0c => {
                i += 1;
                continue;
            }
            b'.' => TokenKind::Dot,
            b',' => TokenKind::Comma,
            b'(' => TokenKind::Open,
            b')' => TokenKind::Close,
            b'|' if bytes.get(i + 1) == Some(&b'|') => {
                i += 1;
                TokenKind::Or
            }
            b'\'' | b'"' => {
                let end = text[i + 1..]
                    .find(c as char)
                    .ok_or_else(|| syntax_error(text, offset, "unterminated string literal"))?;
                let content = &text[i + 1..i + 1 + end];
                if content.contains('\\') {
                    return Err(syntax_error(
                        text,
                        offset,
                        "escape sequences are not supported in a bound; write the hex digits",
                    ));
                }
                i += end + 1;
                TokenKind::Str(content.to_owned())
            }
            c if c.is_ascii_digit() => {
                let len = bytes[i..]
                    .iter()
                    .take_while(|b| b.is_ascii_alphanumeric())
                    .count();
                i += len - 1;
                TokenKind::Number(text[offset..offset + len].to_owned())
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let len = bytes[i..]
                    .iter()
                    .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
                    .count();
                let ident = &text[i..i + len];
                // A raw string literal, r'...' or R"...", holds its characters as written.
                if (ident == "r" || ident == "R") && matches!(bytes.get(i + 1), Some(b'\'' | b'"'))
                {
                    let quote = bytes[i + 1] as char;
                    let end = text[i + 2..]
                        .find(quote)
                        .ok_or_else(|| syntax_error(text, offset, "unterminated string literal"))?;
                    let content = &text[i + 2..i + 2 + end];
                    i += end + 2;
                    TokenKind::Str(content.to_owned())
                } else {
                    i += len - 1;
                    TokenKind::Ident(ident.to_owned())
                }
            }
            _ => {
                let ch = text[i..].chars().next().unwrap_or('?');
                return Err(syntax_error(
                    text,
                    offset,
                    format!(
                        "unexpected {ch:?}; a selector is shardRange(...) calls joined with ||"
                    ),
                ));
            }
        };
        i += 1;
        tokens.push(Token { kind, offset });
    }
    Ok(tokens)
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    next: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next)
    }

    fn end_offset(&self) -> usize {
        self.text.len()
    }

    fn syntax(&self, offset: usize, problem: impl Into<String>) -> ShardSelectorError {
        syntax_error(self.text, offset, problem)
    }

    fn expect(&mut self, kind: &TokenKind, what: &str) -> Result<usize, ShardSelectorError> {
        match self.tokens.get(self.next) {
            Some(tok) if tok.kind == *kind => {
                self.next += 1;
                Ok(tok.offset)
            }
            Some(tok) => Err(self.syntax(tok.offset, format!("expected {what}"))),
            None => Err(self.syntax(self.end_offset(), format!("expected {what}"))),
        }
    }

    /// `primary ('||' primary)*`
    fn or_expr(&mut self) -> Result<Vec<(ShardField, HashRange)>, ShardSelectorError> {
        let mut out = self.primary()?;
        while matches!(
            self.peek(),
            Some(Token {
                kind: TokenKind::Or,
                ..
            })
        ) {
            self.next += 1;
            out.extend(self.primary()?);
        }
        Ok(out)
    }

    /// `'(' or_expr ')' | shardRange(field, start, end)`
    fn primary(&mut self) -> Result<Vec<(ShardField, HashRange)>, ShardSelectorError> {
        let Some(tok) = self.peek().cloned() else {
            return Err(self.syntax(self.end_offset(), "expected shardRange(...)"));
        };
        self.next += 1;
        match tok.kind {
            TokenKind::Open => {
                let inner = self.or_expr()?;
                self.expect(&TokenKind::Close, "')'")?;
                Ok(inner)
            }
            TokenKind::Ident(name) => {
                if !matches!(
                    self.peek(),
                    Some(Token {
                        kind: TokenKind::Open,
                        ..
                    })
                ) {
                    return Err(self.syntax(
                        tok.offset,
                        format!("{name:?} is not a shardRange(...) call"),
                    ));
                }
                if name != "shardRange" {
                    return Err(ShardSelectorError::UnsupportedFunction(name));
                }
                self.next += 1;
                Ok(vec![self.shard_range_args()?])
            }
            TokenKind::Str(_) => Err(self.syntax(
                tok.offset,
                "a string literal cannot stand alone; expected shardRange(...)",
            )),
            _ => Err(self.syntax(tok.offset, "expected shardRange(...)")),
        }
    }

    /// The arguments of `shardRange(`, through its `)`.
    fn shard_range_args(&mut self) -> Result<(ShardField, HashRange), ShardSelectorError> {
        // Read the arguments, each a field path or a string literal, then check their count.
        let mut args: Vec<(usize, Arg)> = Vec::new();
        if matches!(
            self.peek(),
            Some(Token {
                kind: TokenKind::Close,
                ..
            })
        ) {
            self.next += 1;
            return Err(ShardSelectorError::ArgumentCount(0));
        }
        loop {
            let offset = self.peek().map_or(self.end_offset(), |t| t.offset);
            args.push((offset, self.argument()?));
            match self.peek().map(|t| &t.kind) {
                Some(TokenKind::Comma) => self.next += 1,
                Some(TokenKind::Close) => {
                    self.next += 1;
                    break;
                }
                Some(_) => {
                    let at = self.peek().map_or(0, |t| t.offset);
                    return Err(self.syntax(at, "expected ',' or ')'"));
                }
                None => return Err(self.syntax(self.end_offset(), "expected ')'")),
            }
        }
        if args.len() != 3 {
            return Err(ShardSelectorError::ArgumentCount(args.len()));
        }
        let field = match &args[0].1 {
            Arg::Path(path) => ShardField::from_path(path)
                .ok_or_else(|| ShardSelectorError::UnsupportedField(path.clone()))?,
            Arg::Str(_) => {
                return Err(self.syntax(
                    args[0].0,
                    "shardRange() first argument: expected a field path (e.g. \
                     object.metadata.uid), not a string",
                ));
            }
        };
        let start = bound(&args[1].1, "hexStart")?;
        let end = bound(&args[2].1, "hexEnd")?;
        if start >= end {
            return Err(ShardSelectorError::EmptyRange {
                start: format_bound(start),
                end: format_bound(end),
            });
        }
        Ok((field, HashRange::raw(start, end)))
    }

    fn argument(&mut self) -> Result<Arg, ShardSelectorError> {
        let Some(tok) = self.peek().cloned() else {
            return Err(self.syntax(self.end_offset(), "expected an argument"));
        };
        self.next += 1;
        match tok.kind {
            TokenKind::Str(s) => Ok(Arg::Str(s)),
            TokenKind::Number(n) => Err(self.syntax(
                tok.offset,
                format!(
                    "bounds are string literals such as '0x8000000000000000', not the number {n}"
                ),
            )),
            TokenKind::Ident(first) => {
                if matches!(
                    self.peek(),
                    Some(Token {
                        kind: TokenKind::Open,
                        ..
                    })
                ) {
                    return Err(self.syntax(
                        tok.offset,
                        format!(
                            "function call {first}(...) is not allowed as an argument; bounds \
                             are string literals such as '0x8000000000000000'"
                        ),
                    ));
                }
                let mut path = first;
                while matches!(
                    self.peek(),
                    Some(Token {
                        kind: TokenKind::Dot,
                        ..
                    })
                ) {
                    self.next += 1;
                    match self.peek().cloned() {
                        Some(Token {
                            kind: TokenKind::Ident(part),
                            ..
                        }) => {
                            self.next += 1;
                            path.push('.');
                            path.push_str(&part);
                        }
                        other => {
                            let at = other.map_or(self.end_offset(), |t| t.offset);
                            return Err(self.syntax(at, "expected a field name after '.'"));
                        }
                    }
                }
                Ok(Arg::Path(path))
            }
            _ => Err(self.syntax(
                tok.offset,
                "expected a field path or a string literal such as '0x8000000000000000'",
            )),
        }
    }
}

enum Arg {
    Path(String),
    Str(String),
}

/// A bound argument's value, checked as the apiserver checks it.
fn bound(arg: &Arg, which: &'static str) -> Result<u128, ShardSelectorError> {
    let err = |problem: String| ShardSelectorError::Bound { which, problem };
    let s = match arg {
        Arg::Str(s) => s,
        Arg::Path(p) => {
            return Err(err(format!(
                "must be a string literal (e.g. '0x8000000000000000'), got {p}"
            )));
        }
    };
    let Some(hex) = s.strip_prefix("0x") else {
        return Err(err(format!("must have a '0x' prefix, got {s:?}")));
    };
    if hex.is_empty() {
        return Err(err("a hex value is required after '0x'".to_owned()));
    }
    if hex.len() > 17 {
        return Err(err(format!(
            "hex value too long ({} digits, at most 17): {s:?}",
            hex.len()
        )));
    }
    if let Some(c) = hex.chars().find(|c| !matches!(c, '0'..='9' | 'a'..='f')) {
        return Err(err(format!(
            "invalid hex character {c:?} in {s:?} (digits are 0-9 and lowercase a-f)"
        )));
    }
    match hex.len() {
        16 => {}
        17 if s == "0x10000000000000000" => {}
        17 => {
            return Err(err(format!(
                "a 17-digit value must be '0x10000000000000000' (2^64), got {s:?}"
            )));
        }
        n => {
            return Err(err(format!(
                "must be a 0x-prefixed 16-digit hex value, got {s:?} (did you mean '0x{}{hex}'?)",
                "0".repeat(16 - n)
            )));
        }
    }
    u128::from_str_radix(hex, 16).map_err(|e| err(format!("{s:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn hash_field_is_fnv1a_64() {
        // The inputs of apimachinery's hash_test.go and the namespaces of a new cluster;
        // the values are Go's hash/fnv New64a over the same bytes, as HashField computes.
        let cases = [
            ("", 0xcbf2_9ce4_8422_2325),
            ("abc", 0xe71f_a219_0541_574b),
            ("test", 0xf9e6_e6ef_197c_2b25),
            ("different", 0x88f3_8c6c_3332_1162),
            ("test-uid-12345", 0xd4c5_3b72_f928_7c28),
            (
                "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
                0x9375_4b72_48a0_0eb9,
            ),
            ("test-uid-123", 0xd0ba_6798_3455_6c0b),
            ("default", 0xebad_a516_8620_c5fe),
            ("kube-system", 0xdf65_c7bc_1d82_b35e),
            ("kube-public", 0x917f_b081_f1a6_5f5a),
            ("kube-node-lease", 0x021f_b6dd_71b8_0174),
        ];
        for (input, want) in cases {
            assert_eq!(hash_field(input), want, "hash_field({input:?})");
        }
    }

    #[test]
    fn the_last_bytes_of_a_value_hardly_reach_the_top_bits() {
        // FNV-1a has no finalisation step: the last bytes are multiplied by the prime only a
        // few times, which carries them into the low bits only. Names differing only in their
        // last characters so land together, even with 256 equal shards (docs/sharding.md).
        let top_bytes: std::collections::BTreeSet<u64> = (0..30)
            .map(|i| hash_field(&format!("ns-{i:02}")) >> 56)
            .collect();
        assert_eq!(top_bytes, [0x7e].into());
        let quarter = |value: &str| hash_field(value) >> 62;
        assert!(
            (0..30).all(|i| quarter(&format!("ns-{i:02}")) == 1),
            "ns-00..ns-29 all fall into the second quarter"
        );
        // Names differing at their start spread, as UUIDs do (random from their first digit).
        let firsts: std::collections::BTreeSet<u64> =
            ('a'..='p').map(|c| quarter(&format!("{c}-ns"))).collect();
        assert_eq!(firsts.len(), 4, "every quarter holds some of a-ns..p-ns");
    }

    fn range(start: u64, end: u128) -> HashRange {
        HashRange::new(start, end).unwrap()
    }

    #[test]
    fn ranges_check_their_bounds() {
        assert_eq!(HashRange::FULL, range(0, 1 << 64));
        assert!(HashRange::FULL.contains(u64::MAX) && HashRange::FULL.contains(0));
        assert_eq!(HashRange::FULL.len(), 1 << 64);
        assert!(matches!(
            HashRange::new(5, 5),
            Err(ShardSelectorError::EmptyRange { .. })
        ));
        assert!(matches!(
            HashRange::new(5, 4),
            Err(ShardSelectorError::EmptyRange { .. })
        ));
        let err = HashRange::new(0, (1 << 64) + 1).unwrap_err();
        assert!(err.to_string().contains("past the end"), "{err}");
        let r = range(10, 20);
        assert!(!r.contains(9) && r.contains(10) && r.contains(19) && !r.contains(20));
        assert_eq!(r.to_string(), "[0x000000000000000a, 0x0000000000000014)");
    }

    #[test]
    fn selectors_normalise_their_ranges() {
        let sel = ShardSelector::new(
            ShardField::Uid,
            [
                range(50, 60),
                range(0, 10),
                range(10, 20),
                range(15, 30),
                range(70, 80),
            ],
        )
        .unwrap();
        assert_eq!(sel.ranges(), [range(0, 30), range(50, 60), range(70, 80)]);
        assert_eq!(
            ShardSelector::new(ShardField::Uid, []),
            Err(ShardSelectorError::NoRanges)
        );
        for (hash, want) in [
            (0, true),
            (29, true),
            (30, false),
            (49, false),
            (55, true),
            (80, false),
        ] {
            assert_eq!(sel.matches_hash(hash), want, "hash {hash}");
        }
        assert!(ShardSelector::full(ShardField::Namespace).is_full());
    }

    #[test]
    fn display_writes_what_the_apiserver_accepts() {
        let halves = ShardSelector::new(
            ShardField::Uid,
            [range(0, 1 << 62), range(1 << 63, 1 << 64)],
        )
        .unwrap();
        assert_eq!(
            halves.to_string(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000') || \
             shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
        );
        let ns = ShardSelector::new(ShardField::Namespace, [range(0xaa, 0xff)]).unwrap();
        assert_eq!(
            ns.to_string(),
            "shardRange(object.metadata.namespace, '0x00000000000000aa', '0x00000000000000ff')"
        );
    }

    #[test]
    fn parse_accepts_what_the_apiserver_accepts() {
        // The valid cases of apiserver's parser_test.go, and forms CEL reads the same way.
        let cases = [
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
                ShardField::Uid,
                vec![range(0, 1 << 63)],
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')",
                ShardField::Uid,
                vec![HashRange::FULL],
            ),
            (
                "shardRange(object.metadata.namespace, '0x00000000000000aa', '0x00000000000000ff')",
                ShardField::Namespace,
                vec![range(0xaa, 0xff)],
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000005') || \
                 shardRange(object.metadata.uid, '0x0000000000000005', '0x000000000000000a') || \
                 shardRange(object.metadata.uid, '0x000000000000000a', '0x000000000000000f')",
                ShardField::Uid,
                vec![range(0, 0xf)],
            ),
            (
                "shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')",
                ShardField::Uid,
                vec![range(0, 1 << 63)],
            ),
            (
                "  shardRange( object.metadata.uid ,  '0x0000000000000000' ,  '0x8000000000000000' )  ",
                ShardField::Uid,
                vec![range(0, 1 << 63)],
            ),
            (
                "(shardRange(object.metadata.uid, \"0x0000000000000000\", r'0x0000000000000010')) \
                 ||\n(shardRange(object.metadata.uid, '0x0000000000000020', '0x0000000000000030'))",
                ShardField::Uid,
                vec![range(0, 0x10), range(0x20, 0x30)],
            ),
        ];
        for (input, field, ranges) in cases {
            let sel: ShardSelector = input.parse().unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(sel.field(), field, "{input:?}");
            assert_eq!(sel.ranges(), ranges, "{input:?}");
            assert_eq!(sel.to_string().parse::<ShardSelector>().unwrap(), sel);
        }
    }

    #[test]
    fn parse_refuses_what_the_apiserver_refuses() {
        // The error cases of apiserver's parser_test.go, each with what the message names.
        let cases = [
            ("", "empty shard selector"),
            (
                "shardRange(object.metadata.uid, '0000000000000000', '0x8000000000000000')",
                "hexStart: must have a '0x' prefix",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '8000000000000000')",
                "hexEnd: must have a '0x' prefix",
            ),
            (
                "shardRange(object.metadata.uid, '0x', '0x8000000000000000')",
                "hexStart: a hex value is required",
            ),
            (
                "shardRange(object.metadata.name, '0x00', '0x80')",
                "unsupported shard field \"object.metadata.name\"",
            ),
            (
                "shardRange(object.metadata.labels, '0x00', '0x80')",
                "unsupported shard field",
            ),
            (
                "invalidFunc(object.metadata.uid, '0x00', '0x80')",
                "unsupported function \"invalidFunc\"",
            ),
            (
                "shardRange(object.metadata.uid, '0x000000000000000000', '0x80')",
                "hex value too long",
            ),
            (
                "shardRange(object.metadata.uid, '0x0g', '0x80')",
                "invalid hex character 'g'",
            ),
            (
                "shardRange(object.metadata.uid, '0x0', '0x8') && shardRange(object.metadata.uid, '0x8', '0xf')",
                "unexpected '&'",
            ),
            (
                "shardRange(object.metadata.uid, 0, 8)",
                "bounds are string literals such as '0x8000000000000000', not the number 0",
            ),
            ("object.metadata.uid > '0x0'", "unexpected '>'"),
            ("object.metadata.uid", "not a shardRange(...) call"),
            (
                "shardRange(object.metadata.uid, '0x0')",
                "requires exactly 3 arguments",
            ),
            (
                "shardRange(object.metadata.uid, hex(0), '0x8')",
                "function call hex(...) is not allowed",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || \
                 shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
                "same field",
            ),
            (
                "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
                "hexStart: must be a 0x-prefixed 16-digit hex value, got \"0x0\" (did you mean \
                 '0x0000000000000000'?)",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0xff')",
                "hexEnd: must be a 0x-prefixed 16-digit hex value",
            ),
            (
                "shardRange(object.metadata.uid, '0x8000000000000000', '0x8000000000000000')",
                "must be less than end",
            ),
            (
                "shardRange(object.metadata.uid, '0xffffffffffffffff', '0x0000000000000000')",
                "must be less than end",
            ),
            // And what the apiserver's parser refuses beyond its own table.
            (
                "shardRange(object.metadata.uid, '0x000000000000000A', '0x8000000000000000')",
                "invalid hex character 'A'",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x20000000000000000')",
                "must be '0x10000000000000000'",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000'",
                "expected ')'",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') ||",
                "expected shardRange(...)",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') x",
                "expected || or the end",
            ),
            ("shardRange('0x00', '0x00', '0x80')", "first argument"),
            (
                "shardRange(object.metadata.uid, '0x0000",
                "unterminated string",
            ),
        ];
        for (input, want) in cases {
            let err = input.parse::<ShardSelector>().expect_err(input).to_string();
            assert!(err.contains(want), "{input:?}: {err:?} lacks {want:?}");
        }
    }

    #[test]
    fn objects_match_by_the_hash_of_their_field() {
        let meta = ObjectMeta {
            uid: Some("test-uid-123".into()),
            namespace: Some("default".into()),
            ..Default::default()
        };
        assert_eq!(ShardField::Uid.value_of(&meta), Some("test-uid-123"));
        assert_eq!(ShardField::Namespace.value_of(&meta), Some("default"));
        let at = |field, hash: u64| {
            ShardSelector::new(field, [range(hash, u128::from(hash) + 1)]).unwrap()
        };
        assert!(at(ShardField::Uid, 0xd0ba_6798_3455_6c0b).matches(&meta));
        assert!(!at(ShardField::Uid, 0xd0ba_6798_3455_6c0c).matches(&meta));
        assert!(at(ShardField::Namespace, 0xebad_a516_8620_c5fe).matches(&meta));
        // A cluster-scoped object hashes the empty namespace.
        let cluster = ObjectMeta::default();
        assert!(at(ShardField::Namespace, hash_field("")).matches(&cluster));
    }

    #[test]
    fn difference_union_and_contains() {
        let sel = |ranges: &[(u64, u128)]| {
            ShardSelector::new(ShardField::Uid, ranges.iter().map(|&(s, e)| range(s, e))).unwrap()
        };
        let old = sel(&[(0, 100), (200, 300)]);
        let new = sel(&[(50, 250)]);
        assert_eq!(new.difference(&old), Some(sel(&[(100, 200)])));
        assert_eq!(old.difference(&new), Some(sel(&[(0, 50), (250, 300)])));
        assert_eq!(sel(&[(10, 20)]).difference(&old), None);
        assert_eq!(
            ShardSelector::full(ShardField::Uid).difference(&old),
            Some(sel(&[(100, 200), (300, 1 << 64)]))
        );
        assert_eq!(old.union(&new), Some(sel(&[(0, 300)])));
        assert!(
            old.union(&ShardSelector::full(ShardField::Namespace))
                .is_none()
        );
        assert!(old.contains(&sel(&[(10, 20), (210, 300)])));
        assert!(!old.contains(&new));
        // Another field: nothing is known per hash.
        let ns = ShardSelector::full(ShardField::Namespace);
        assert_eq!(old.difference(&ns), Some(old.clone()));
    }

    #[test]
    fn shard_info_is_read_from_json_lists() {
        let body = br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5",
            "shardInfo":{"selector":"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"}},
            "items":[{"metadata":{"name":"a"}}]}"#;
        let info = shard_info_from_json(body).unwrap().unwrap();
        assert!(info.selector.starts_with("shardRange("));
        let plain = br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"},"items":[]}"#;
        assert_eq!(shard_info_from_json(plain).unwrap(), None);
    }
}
