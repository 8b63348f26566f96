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
        }
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
                }
                continue;
            }
            match bytes[i] {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        let len = i + 1;
                        if len > self.max {
                            return Err(FrameError::TooLarge { max: self.max });
                        }
                        self.scanned = 0;
                        return Ok(Some(self.buf.split_to(len).freeze()));
                    }
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
    fn new(format: StreamFormat, max: usize) -> Self {
        match format {
            StreamFormat::Json => Framer::Json(JsonFramer::new(max)),
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
        framer: Framer::new(format, max_frame_size),
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
