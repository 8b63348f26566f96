//! Watch stream framing: a byte stream cut into one frame per watch event — concatenated
//! JSON objects, or protobuf messages each after a 4-byte big-endian length (tokio-util's
//! length-delimited codec).
//!
//! The API server writes each event as a JSON object followed by a newline, but nothing ties
//! HTTP chunks or TCP reads to events: one read may hold several events, and one event may
//! span many reads. [`JsonFramer`] is a small incremental scanner that tracks string,
//! escape and nesting state across reads, so each byte is looked at once however the input
//! is split, and a complete frame is handed out as a zero-copy [`Bytes`] slice. It checks
//! only framing (balanced braces outside strings); the event decoder validates the JSON.
//!
//! For a watch whose objects are decoded without `managedFields`, the JSON framer also cuts
//! `object.metadata.managedFields` out of each event as it scans it
//! (`JsonFramer::dropping_managed_fields`). What is cut is not validated: a malformed value
//! inside it goes unnoticed (the rest of the event is decoded as strictly as before), and a
//! decoding error in such an event gives positions in the cut text.
//!
//! Frames are bounded ([`DEFAULT_MAX_FRAME_SIZE`], apimachinery's streaming decoder limit)
//! so a broken or hostile server cannot make the client buffer without end.

use std::error::Error as StdError;
use std::fmt;

use bytes::{Buf, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use serde::de::Error as _;
use tokio_util::codec::{Decoder as _, LengthDelimitedCodec};

use super::response::StreamFormat;
use super::retry::TransportFailure;
use crate::error::Error;

/// The largest watch event accepted: 16 MiB, as apimachinery's streaming decoder.
pub(crate) const DEFAULT_MAX_FRAME_SIZE: usize = 16 * 1024 * 1024;

/// Why the stream cannot be framed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    /// One event exceeded the size limit.
    #[error("a watch event exceeded the maximum frame size of {max} bytes")]
    TooLarge {
        /// The limit.
        max: usize,
    },
    /// Something other than whitespace or a JSON object/array between events.
    #[error("unexpected byte {byte:#04x} between watch events, expected a JSON object")]
    Unexpected {
        /// The offending byte.
        byte: u8,
    },
}

/// Splits concatenated JSON values into frames, incrementally.
#[derive(Debug)]
pub(crate) struct JsonFramer {
    /// Unconsumed input; a frame in progress always starts at index 0.
    buf: BytesMut,
    /// How far into `buf` the current frame has been scanned.
    scanned: usize,
    /// Nesting depth of the current frame; 0 between frames.
    depth: usize,
    in_string: bool,
    escaped: bool,
    max: usize,
    /// Whether to cut `object.metadata.managedFields` out of each frame.
    drop_managed_fields: bool,
    /// Where the string being scanned began (its opening quote).
    string_start: usize,
    /// The last complete string of the frame: its opening quote and one past its closing one.
    last_string: (usize, usize),
    /// How far the scan has come along `object.metadata.managedFields` in this frame.
    path: Path,
}

/// Progress of [`JsonFramer`] along `object.metadata.managedFields` in the current frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// In the event, before its `object`.
    Event,
    /// In the event's object, before its `metadata`.
    Object,
    /// In the object's metadata, before a `managedFields` key.
    Metadata,
    /// After the key `"managedFields"`, whose quote is at `start`, before its value.
    Key { start: usize },
    /// In the value of the member that starts at `start`.
    Value { start: usize },
    /// The member spans `start..end`.
    Found { start: usize, end: usize },
    /// Nothing (more) to cut in this frame.
    Done,
}

impl JsonFramer {
    pub(crate) fn new(max_frame_size: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            scanned: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            max: max_frame_size,
            drop_managed_fields: false,
            string_start: 0,
            last_string: (0, 0),
            path: Path::Event,
        }
    }

    /// Each frame comes out without the member `managedFields` of its `object.metadata`,
    /// and the comma that separated it: what a decoder that skips them
    /// ([`Api::without_managed_fields`](crate::Api::without_managed_fields)) would throw away,
    /// cut while the frame is scanned anyway instead of parsed token by token. Skipping the
    /// member while decoding was 8.5% of the Deployment controller's instructions; a
    /// separate scan to find it cost as much (docs/benchmarks/controller.md). Only the first
    /// such member is cut, and only when the scan is sure of where it is (keys compared as
    /// sent; a key written with escapes is left for the decoder to skip); everything else
    /// of the frame is kept byte for byte.
    pub(crate) fn dropping_managed_fields(mut self, yes: bool) -> Self {
        self.drop_managed_fields = yes;
        self
    }

    /// The frame of the first `len` bytes of the buffer, the member cut out if found.
    fn take_frame(&mut self, len: usize) -> Bytes {
        let path = std::mem::replace(&mut self.path, Path::Event);
        self.last_string = (0, 0);
        let Path::Found { start, end } = path else {
            return self.buf.split_to(len).freeze();
        };
        let frame = &self.buf[..len];
        // One separating comma goes with the member: the one before it, or else the one after.
        let before = frame[..start]
            .iter()
            .rposition(|b| !b.is_ascii_whitespace());
        let (from, to) = match before {
            Some(comma) if frame[comma] == b',' => (comma, end),
            _ => {
                let after = end
                    + frame[end..]
                        .iter()
                        .take_while(|b| b.is_ascii_whitespace())
                        .count();
                if frame.get(after) == Some(&b',') {
                    (start, after + 1)
                } else {
                    (start, end)
                }
            }
        };
        let mut cut = BytesMut::with_capacity(len - (to - from));
        cut.extend_from_slice(&frame[..from]);
        cut.extend_from_slice(&frame[to..]);
        self.buf.advance(len);
        cut.freeze()
    }

    /// Appends input.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete frame, `None` if more input is needed.
    pub(crate) fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        if self.depth == 0 {
            let ws = self
                .buf
                .iter()
                .take_while(|b| b.is_ascii_whitespace())
                .count();
            self.buf.advance(ws);
            match self.buf.first() {
                None => return Ok(None),
                Some(b'{' | b'[') => {
                    self.depth = 1;
                    self.scanned = 1;
                }
                Some(&byte) => return Err(FrameError::Unexpected { byte }),
            }
        }
        let mut i = self.scanned;
        let bytes = &self.buf[..];
        while i < bytes.len() {
            if self.in_string {
                if self.escaped {
                    // The previous chunk ended with a backslash: this byte is escaped.
                    self.escaped = false;
                    i += 1;
                    continue;
                }
                // Skip ahead to the next quote or backslash: most of an object's bytes are
                // inside strings, so this vectorized search does most of the scanning.
                match memchr::memchr2(b'"', b'\\', &bytes[i..]) {
                    None => {
                        i = bytes.len();
                        break;
                    }
                    Some(n) => i += n,
                }
                if bytes[i] == b'\\' {
                    if i + 1 < bytes.len() {
                        i += 2;
                    } else {
                        self.escaped = true;
                        i += 1;
                    }
                } else {
                    self.in_string = false;
                    i += 1;
                    if self.drop_managed_fields {
                        self.last_string = (self.string_start, i);
                        if self.path == Path::Metadata
                            && self.depth == 3
                            && bytes[self.string_start + 1..i - 1] == *b"managedFields"
                        {
                            self.path = Path::Key {
                                start: self.string_start,
                            };
                        }
                    }
                }
                continue;
            }
            match bytes[i] {
                b'"' => {
                    self.in_string = true;
                    self.string_start = i;
                }
                c @ (b'{' | b'[') => {
                    if self.drop_managed_fields {
                        self.path =
                            path_on_open(self.path, bytes, self.last_string, i, c, self.depth);
                    }
                    self.depth += 1;
                }
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        let len = i + 1;
                        if len > self.max {
                            return Err(FrameError::TooLarge { max: self.max });
                        }
                        self.scanned = 0;
                        return Ok(Some(self.take_frame(len)));
                    }
                    if self.drop_managed_fields {
                        self.path = path_on_close(self.path, i, self.depth);
                    }
                }
                // A scalar value after the key: nothing to cut.
                b',' if self.depth == 3 && matches!(self.path, Path::Key { .. }) => {
                    self.path = Path::Done;
                }
                _ => {}
            }
            i += 1;
        }
        self.scanned = i;
        if self.buf.len() > self.max {
            return Err(FrameError::TooLarge { max: self.max });
        }
        Ok(None)
    }

    /// Bytes of an incomplete frame left at the end of input.
    pub(crate) fn pending(&self) -> usize {
        if self.depth == 0 {
            self.buf.iter().filter(|b| !b.is_ascii_whitespace()).count()
        } else {
            self.buf.len()
        }
    }

    /// Whether the input ended right after a backslash inside a string.
    #[cfg(test)]
    fn is_mid_escape(&self) -> bool {
        self.escaped
    }
}

/// Whether `last` (a string's opening quote and one past its closing one) is the key `name`
/// of the value whose first byte is at `value` (only a colon and whitespace between them).
fn key_before(buf: &[u8], last: (usize, usize), value: usize, name: &[u8]) -> bool {
    let (start, end) = last;
    if end < start + 2 || end > value || buf[start + 1..end - 1] != *name {
        return false;
    }
    let between = &buf[end..value];
    between.iter().filter(|&&b| b == b':').count() == 1
        && between
            .iter()
            .all(|&b| b == b':' || b.is_ascii_whitespace())
}

/// The path after a container opens at `i` (its byte `open`) inside nesting `depth`.
fn path_on_open(
    path: Path,
    buf: &[u8],
    last: (usize, usize),
    i: usize,
    open: u8,
    depth: usize,
) -> Path {
    match (path, depth, open) {
        (Path::Event, 1, b'{') if key_before(buf, last, i, b"object") => Path::Object,
        (Path::Object, 2, b'{') if key_before(buf, last, i, b"metadata") => Path::Metadata,
        (Path::Key { start }, 3, _) if key_before(buf, last, i, b"managedFields") => {
            Path::Value { start }
        }
        (Path::Key { .. }, 3, _) => Path::Done,
        (path, _, _) => path,
    }
}

/// The path after a container closes at `i`, back to nesting `depth`.
fn path_on_close(path: Path, i: usize, depth: usize) -> Path {
    match (path, depth) {
        (Path::Value { start }, 3) => Path::Found { start, end: i + 1 },
        // The metadata, or the object, closed without the member.
        (Path::Metadata | Path::Key { .. }, 2) | (Path::Object, 1) => Path::Done,
        (path, _) => path,
    }
}

/// The framer of a watch stream's format.
#[derive(Debug)]
enum Framer {
    Json(JsonFramer),
    Protobuf {
        codec: LengthDelimitedCodec,
        buf: BytesMut,
        max: usize,
    },
}

impl Framer {
    fn new(format: StreamFormat, drop_managed_fields: bool, max: usize) -> Self {
        match format {
            StreamFormat::Json => {
                Framer::Json(JsonFramer::new(max).dropping_managed_fields(drop_managed_fields))
            }
            StreamFormat::Protobuf => Framer::Protobuf {
                codec: LengthDelimitedCodec::builder()
                    .length_field_length(4)
                    .big_endian()
                    .max_frame_length(max)
                    .new_codec(),
                buf: BytesMut::new(),
                max,
            },
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        match self {
            Framer::Json(f) => f.push(chunk),
            Framer::Protobuf { buf, .. } => buf.extend_from_slice(chunk),
        }
    }

    fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        match self {
            Framer::Json(f) => f.next_frame(),
            Framer::Protobuf { codec, buf, max } => match codec.decode(buf) {
                Ok(frame) => Ok(frame.map(BytesMut::freeze)),
                // The codec's only error is a length above the limit.
                Err(_) => Err(FrameError::TooLarge { max: *max }),
            },
        }
    }

    fn pending(&self) -> usize {
        match self {
            Framer::Json(f) => f.pending(),
            Framer::Protobuf { buf, .. } => buf.len(),
        }
    }
}

/// Turns a response body into watch frames.
///
/// * A clean end of the body ends the stream.
/// * The connection closing or timing out mid-stream also ends the stream quietly (logged),
///   as client-go's stream watcher does: the caller re-watches from its last
///   resourceVersion. A partial event at the end is dropped.
/// * Any other body error, and framing errors, are yielded once and end the stream.
pub(crate) fn watch_frames<S, E>(
    body: S,
    format: StreamFormat,
    drop_managed_fields: bool,
    max_frame_size: usize,
    method: &str,
    url: &str,
) -> impl Stream<Item = Result<Bytes, Error>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: StdError + Send + Sync + 'static,
{
    struct State<S> {
        body: S,
        framer: Framer,
        done: bool,
        method: String,
        url: String,
    }
    let state = State {
        body,
        framer: Framer::new(format, drop_managed_fields, max_frame_size),
        done: false,
        method: method.to_owned(),
        url: url.to_owned(),
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            match st.framer.next_frame() {
                Ok(Some(frame)) => return Some((Ok(frame), st)),
                Ok(None) => {}
                Err(e) => {
                    st.done = true;
                    let err = Error::Decode {
                        what: format!("watch stream of {} {}", st.method, st.url),
                        source: serde_json::Error::custom(e),
                    };
                    return Some((Err(err), st));
                }
            }
            match st.body.next().await {
                Some(Ok(chunk)) => st.framer.push(&chunk),
                Some(Err(e)) => {
                    st.done = true;
                    let failure = TransportFailure::classify(&e);
                    if failure.ends_watch_quietly() {
                        tracing::debug!(
                            url = %st.url,
                            error = %ErrorChain(&e),
                            partial_bytes = st.framer.pending(),
                            "watch connection closed"
                        );
                        return None;
                    }
                    let err = Error::Transport {
                        verb: st.method.clone(),
                        url: st.url.clone(),
                        source: Box::new(e),
                    };
                    return Some((Err(err), st));
                }
                None => {
                    let partial = st.framer.pending();
                    if partial > 0 {
                        tracing::info!(
                            url = %st.url,
                            partial_bytes = partial,
                            "watch stream ended in the middle of an event; the partial event is dropped"
                        );
                    }
                    return None;
                }
            }
        }
    })
}

/// Displays an error with its sources: `outer: inner: root`.
pub(crate) struct ErrorChain<'a>(pub(crate) &'a (dyn StdError + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last = self.0.to_string();
        f.write_str(&last)?;
        let mut cur = self.0.source();
        while let Some(e) = cur {
            let msg = e.to_string();
            // Some errors repeat their source's message; print it once.
            if !last.contains(&msg) {
                write!(f, ": {msg}")?;
            }
            last = msg;
            cur = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn frames_of(chunks: &[&[u8]], max: usize) -> Result<Vec<String>, FrameError> {
        let mut f = JsonFramer::new(max);
        let mut out = Vec::new();
        for c in chunks {
            f.push(c);
            while let Some(frame) = f.next_frame()? {
                out.push(String::from_utf8(frame.to_vec()).unwrap());
            }
        }
        assert_eq!(f.pending(), 0, "left over input");
        Ok(out)
    }

    const A: &str = r#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#;
    const B: &str =
        r#"{"type":"MODIFIED","object":{"metadata":{"name":"b \"}{[\\","x":[1,{"y":"}"}]}}}"#;
    const C: &str = r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#;

    /// The frames of `input` from a framer that cuts managedFields, fed one byte at a time
    /// and in one chunk (which must agree).
    fn cut_frames(input: &str) -> Vec<String> {
        let run = |step: usize| {
            let mut f = JsonFramer::new(1 << 20).dropping_managed_fields(true);
            let mut out = Vec::new();
            for chunk in input.as_bytes().chunks(step) {
                f.push(chunk);
                while let Some(frame) = f.next_frame().unwrap() {
                    out.push(String::from_utf8(frame.to_vec()).unwrap());
                }
            }
            assert_eq!(f.pending(), 0);
            out
        };
        let whole = run(input.len().max(1));
        assert_eq!(run(1), whole, "byte by byte");
        whole
    }

    #[test]
    fn managed_fields_are_cut_from_the_objects_metadata_only() {
        let cases: &[(&str, &str)] = &[
            // Last, first, middle, only member; whitespace around; an object as the value.
            (
                r#"{"type":"ADDED","object":{"metadata":{"name":"a","managedFields":[{"f":{"}":1}}]}}}"#,
                r#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#,
            ),
            (
                r#"{"type":"ADDED","object":{"metadata":{"managedFields":[],"name":"a"}}}"#,
                r#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#,
            ),
            (
                r#"{"type":"ADDED","object":{"metadata":{"uid":"u","managedFields":[1],"name":"a"}}}"#,
                r#"{"type":"ADDED","object":{"metadata":{"uid":"u","name":"a"}}}"#,
            ),
            (
                r#"{"object":{"metadata":{"managedFields":{}}},"type":"ADDED"}"#,
                r#"{"object":{"metadata":{}},"type":"ADDED"}"#,
            ),
            (
                "{ \"object\" : { \"metadata\" : { \"name\":\"a\" ,\n \"managedFields\" :\t[ \"]\\\"[\" ] } } }",
                "{ \"object\" : { \"metadata\" : { \"name\":\"a\"  } } }",
            ),
            // Kept: elsewhere than object.metadata, a scalar value, an annotation named so,
            // a key written with escapes, a value that is the string "managedFields".
            (
                r#"{"type":"ADDED","object":{"spec":{"managedFields":[]},"metadata":{"name":"a"}}}"#,
                r#"{"type":"ADDED","object":{"spec":{"managedFields":[]},"metadata":{"name":"a"}}}"#,
            ),
            (
                r#"{"type":"ADDED","metadata":{"managedFields":[]},"object":{"template":{"metadata":{"managedFields":[]}}}}"#,
                r#"{"type":"ADDED","metadata":{"managedFields":[]},"object":{"template":{"metadata":{"managedFields":[]}}}}"#,
            ),
            (
                r#"{"type":"ADDED","object":{"metadata":{"managedFields":null,"name":"a"}}}"#,
                r#"{"type":"ADDED","object":{"metadata":{"managedFields":null,"name":"a"}}}"#,
            ),
            (
                r#"{"type":"ADDED","object":{"metadata":{"annotations":{"managedFields":"x"}}}}"#,
                r#"{"type":"ADDED","object":{"metadata":{"annotations":{"managedFields":"x"}}}}"#,
            ),
            (
                r#"{"type":"ADDED","object":{"metadata":{"managed\u0046ields":[]}}}"#,
                r#"{"type":"ADDED","object":{"metadata":{"managed\u0046ields":[]}}}"#,
            ),
            (
                r#"{"type":"ADDED","object":{"metadata":{"name":"managedFields","x":[]}}}"#,
                r#"{"type":"ADDED","object":{"metadata":{"name":"managedFields","x":[]}}}"#,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(cut_frames(input), [*want], "{input}");
        }
        // Each frame of a stream on its own; the plain framer keeps everything.
        let two = format!("{}\n{}", cases[0].0, cases[1].0);
        assert_eq!(cut_frames(&two), [cases[0].1, cases[1].1]);
        assert_eq!(
            frames_of(&[two.as_bytes()], 1 << 20).unwrap(),
            [cases[0].0, cases[1].0]
        );
    }

    #[test]
    fn one_event_per_chunk() {
        let input = [format!("{A}\n"), format!("{B}\n"), format!("{C}\n")];
        let chunks: Vec<&[u8]> = input.iter().map(|s| s.as_bytes()).collect();
        assert_eq!(frames_of(&chunks, 1 << 20).unwrap(), vec![A, B, C]);
    }

    #[test]
    fn several_events_per_chunk_with_or_without_separators() {
        let joined = format!("{A}\n{B}{C}\r\n  ");
        assert_eq!(
            frames_of(&[joined.as_bytes()], 1 << 20).unwrap(),
            vec![A, B, C]
        );
    }

    #[test]
    fn events_split_at_every_byte() {
        let all = format!("{A}\n{B}\n{C}\n");
        let bytes = all.as_bytes();
        // One byte per chunk.
        let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(frames_of(&chunks, 1 << 20).unwrap(), vec![A, B, C]);
        // Every two-way split.
        for cut in 0..=bytes.len() {
            let (x, y) = bytes.split_at(cut);
            assert_eq!(
                frames_of(&[x, y], 1 << 20).unwrap(),
                vec![A, B, C],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn escape_at_chunk_boundary() {
        let mut f = JsonFramer::new(1 << 20);
        f.push(br#"{"a":"x\"#);
        assert_eq!(f.next_frame().unwrap(), None);
        assert!(f.is_mid_escape());
        f.push(br#""}"#);
        // The quote after the backslash is escaped, so the string is still open.
        assert_eq!(f.next_frame().unwrap(), None);
        f.push(br#""}"#);
        assert_eq!(
            f.next_frame().unwrap().unwrap(),
            Bytes::from_static(br#"{"a":"x\"}"}"#)
        );
        // An escaped ordinary byte at the start of a chunk does not swallow the next quote.
        let mut f = JsonFramer::new(1 << 20);
        f.push(br#"{"a":"x\"#);
        assert_eq!(f.next_frame().unwrap(), None);
        f.push(br#"n"}"#);
        assert_eq!(
            f.next_frame().unwrap().unwrap(),
            Bytes::from_static(br#"{"a":"x\n"}"#)
        );
    }

    #[test]
    fn frame_size_is_bounded() {
        let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(100));
        assert_eq!(
            frames_of(&[big.as_bytes()], 50),
            Err(FrameError::TooLarge { max: 50 })
        );
        // Also when the frame never completes.
        let mut f = JsonFramer::new(50);
        for _ in 0..10 {
            f.push(br#"{"aaaaaaaaa":1,"#);
            if let Err(e) = f.next_frame() {
                assert_eq!(e, FrameError::TooLarge { max: 50 });
                return;
            }
        }
        panic!("an unbounded frame was buffered");
    }

    #[test]
    fn garbage_between_events_is_an_error() {
        assert_eq!(
            frames_of(&[format!("{A}\nnull").as_bytes()], 1 << 20),
            Err(FrameError::Unexpected { byte: b'n' })
        );
    }

    #[test]
    fn partial_event_is_pending() {
        let mut f = JsonFramer::new(1 << 20);
        f.push(br#"{"type":"ADD"#);
        assert_eq!(f.next_frame().unwrap(), None);
        assert_eq!(f.pending(), 12);
        let mut f = JsonFramer::new(1 << 20);
        f.push(b" \n ");
        assert_eq!(f.next_frame().unwrap(), None);
        assert_eq!(f.pending(), 0);
    }

    fn body(
        items: Vec<Result<&'static [u8], io::Error>>,
    ) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + Unpin + 'static {
        futures::stream::iter(
            items
                .into_iter()
                .map(|r| r.map(Bytes::from_static))
                .collect::<Vec<_>>(),
        )
    }

    #[tokio::test]
    async fn stream_ends_cleanly_and_quietly_on_eof_family() {
        let s = watch_frames(
            body(vec![
                Ok(b"{\"a\":1}\n{\"b\""),
                Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            ]),
            StreamFormat::Json,
            false,
            1024,
            "GET",
            "http://h/api/v1/pods?watch=1",
        );
        let got: Vec<_> = s.collect().await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref().unwrap(), &Bytes::from_static(b"{\"a\":1}"));
    }

    #[tokio::test]
    async fn other_body_errors_are_yielded_once() {
        let s = watch_frames(
            body(vec![
                Ok(b"{\"a\":1}\n"),
                Err(io::Error::other("tls: bad record mac")),
                Ok(b"{\"never\":1}"),
            ]),
            StreamFormat::Json,
            false,
            1024,
            "GET",
            "http://h/w",
        );
        let got: Vec<_> = s.collect().await;
        assert_eq!(got.len(), 2);
        let err = got[1].as_ref().unwrap_err();
        assert!(matches!(err, Error::Transport { .. }), "{err}");
        assert!(err.to_string().contains("bad record mac"), "{err}");
    }

    #[tokio::test]
    async fn framing_errors_are_yielded_once() {
        let s = watch_frames(
            body(vec![Ok(b"{\"a\":1} oops {\"b\":2}")]),
            StreamFormat::Json,
            false,
            1024,
            "GET",
            "http://h/w",
        );
        let got: Vec<_> = s.collect().await;
        assert_eq!(got.len(), 2);
        let err = got[1].as_ref().unwrap_err();
        assert!(matches!(err, Error::Decode { .. }));
        assert!(
            err.to_string().contains("watch stream of GET http://h/w"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn protobuf_frames_are_cut_by_their_length_prefix_across_chunks() {
        // Two frames ("abc", "de") split mid-prefix and mid-payload, then an oversized one.
        let s = watch_frames(
            body(vec![
                Ok(b"\0\0"),
                Ok(b"\0\x03ab"),
                Ok(b"c\0\0\0\x02de\0\0\x04\x01"),
            ]),
            StreamFormat::Protobuf,
            false,
            1024,
            "GET",
            "http://h/w",
        );
        let got: Vec<_> = s.collect().await;
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0].as_ref().unwrap(), &Bytes::from_static(b"abc"));
        assert_eq!(got[1].as_ref().unwrap(), &Bytes::from_static(b"de"));
        let err = got[2].as_ref().unwrap_err();
        assert!(
            err.to_string().contains("maximum frame size of 1024"),
            "{err}"
        );
    }

    #[test]
    fn error_chain_prints_each_cause_once() {
        #[derive(Debug)]
        struct Outer(io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("error sending request")
            }
        }
        impl StdError for Outer {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(io::Error::other("connection reset"));
        assert_eq!(
            ErrorChain(&e).to_string(),
            "error sending request: connection reset"
        );
    }
}
