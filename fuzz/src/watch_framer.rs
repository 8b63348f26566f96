//! `watch_framer`: the watch body framer on arbitrary bytes, cut into arbitrary chunks.
//!
//! Input: the first byte picks the frame size limit (`4 * b + 1` bytes, or 16 MiB for 255),
//! the second seeds the chunk sizes; the rest is the body.
//!
//! Properties:
//! * never panics;
//! * the frames, the error and the pending byte count do not depend on how the body is cut
//!   into chunks (one chunk, one byte per chunk, pseudo-random chunks);
//! * no byte is lost or duplicated: the frames are the body's bytes in order with only ASCII
//!   whitespace between them, and what is left at the end is exactly the pending count (or
//!   the byte a framing error names);
//! * each frame is one balanced JSON object or array, checked by an independent scanner,
//!   and no frame is longer than the limit;
//! * when serde_json reads the body as a sequence of objects and arrays that fit the limit,
//!   the frames are exactly those values' texts;
//! * a framer that cuts `object.metadata.managedFields` (for `Api::without_managed_fields`)
//!   gives the same frames but for one contiguous range removed, whatever the chunks, and
//!   where a frame decodes as a watch event without managedFields, its cut frame decodes to
//!   the same event.

use bytes::Bytes;
use kctrl_client::fuzzing::{WatchFramer, decode_event_without_managed_fields};
use serde_json::value::RawValue;

/// How a run of the framer ended.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    frames: Vec<Bytes>,
    /// `Ok(pending bytes)` at the end of input, or the framing error.
    end: Result<usize, String>,
}

fn run(
    body: &[u8],
    max: usize,
    cut: bool,
    chunk_sizes: &mut dyn Iterator<Item = usize>,
) -> Outcome {
    let mut framer = if cut {
        WatchFramer::dropping_managed_fields(max)
    } else {
        WatchFramer::new(max)
    };
    let mut frames = Vec::new();
    let mut rest = body;
    loop {
        let n = chunk_sizes.next().unwrap_or(rest.len()).min(rest.len());
        let (chunk, tail) = rest.split_at(n);
        framer.push(chunk);
        rest = tail;
        loop {
            match framer.next_frame() {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(e) => {
                    return Outcome {
                        frames,
                        end: Err(e),
                    };
                }
            }
        }
        if rest.is_empty() {
            return Outcome {
                frames,
                end: Ok(framer.pending()),
            };
        }
    }
}

/// `run` on one chunk, one byte per chunk and pseudo-random chunks (seeded by `seed`), which
/// must agree; the one-chunk outcome.
fn run_chunked(body: &[u8], max: usize, cut: bool, seed: u8) -> Outcome {
    let what = if cut { "cutting: " } else { "" };
    let whole = run(body, max, cut, &mut std::iter::empty());
    let bytewise = run(body, max, cut, &mut std::iter::repeat(1));
    assert_eq!(
        bytewise, whole,
        "{what}one byte per chunk differs from one chunk"
    );
    let mut state = u32::from(seed) | 0x100;
    let mut random = std::iter::from_fn(|| {
        // xorshift32: small chunks, now and then an empty one.
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        Some((state % 23) as usize)
    });
    assert_eq!(
        run(body, max, cut, &mut random),
        whole,
        "{what}random chunks differ from one chunk"
    );
    whole
}

/// The property function.
pub fn check(data: &[u8]) {
    let [limit, seed, body @ ..] = data else {
        return;
    };
    let max = if *limit == u8::MAX {
        16 << 20
    } else {
        4 * usize::from(*limit) + 1
    };

    let whole = run_chunked(body, max, false, *seed);

    check_cut(body, max, *seed, &whole);

    // Reassemble the body from the frames.
    let mut pos = 0;
    let skip_ws = |mut p: usize| {
        while body.get(p).is_some_and(u8::is_ascii_whitespace) {
            p += 1;
        }
        p
    };
    for frame in &whole.frames {
        pos = skip_ws(pos);
        assert!(
            body[pos..].starts_with(frame),
            "frame {frame:?} is not the body's next bytes at {pos}"
        );
        assert!(frame.len() <= max, "frame longer than the limit {max}");
        assert_balanced(frame);
        pos += frame.len();
    }
    pos = skip_ws(pos);
    match &whole.end {
        Ok(pending) => assert_eq!(
            *pending,
            body.len() - pos,
            "pending count differs from the unframed rest"
        ),
        Err(e) if e.starts_with("unexpected byte") => {
            let byte = body[pos];
            assert!(
                e.contains(&format!("{byte:#04x}")),
                "error {e:?} does not name the byte {byte:#04x} at {pos}"
            );
            assert!(!matches!(byte, b'{' | b'['), "{e}");
        }
        Err(e) => {
            assert!(e.contains("maximum frame size"), "unknown error {e:?}");
            assert!(
                body.len() - pos > max,
                "{e} with only {} bytes left",
                body.len() - pos
            );
        }
    }

    // Differential: serde_json's own reading of a stream of values.
    let values: Result<Vec<&RawValue>, _> = serde_json::Deserializer::from_slice(body)
        .into_iter::<&RawValue>()
        .collect();
    if let Ok(values) = values
        && values
            .iter()
            .all(|v| v.get().starts_with(['{', '[']) && v.get().len() <= max)
        && body.iter().all(|b| *b != 0x0c)
    {
        let texts: Vec<&[u8]> = values.iter().map(|v| v.get().as_bytes()).collect();
        let frames: Vec<&[u8]> = whole.frames.iter().map(|f| &f[..]).collect();
        assert_eq!(frames, texts, "frames differ from serde_json's values");
        assert_eq!(whole.end, Ok(0));
    }
}

/// An independent check that `frame` is one bracketed value: depth returns to zero exactly
/// at its last byte, counting brackets outside strings only.
fn assert_balanced(frame: &[u8]) {
    assert!(matches!(frame.first(), Some(b'{' | b'[')), "{frame:?}");
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in frame.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    assert_eq!(i + 1, frame.len(), "frame {frame:?} closes early at {i}");
                }
            }
            _ => {}
        }
    }
    assert_eq!(depth, 0, "frame {frame:?} is not closed");
}

/// The framer that cuts `object.metadata.managedFields`, against the plain one's `plain`.
fn check_cut(body: &[u8], max: usize, seed: u8, plain: &Outcome) {
    let whole = run_chunked(body, max, true, seed);
    assert_eq!(whole.end, plain.end, "cutting changed how the stream ends");
    assert_eq!(whole.frames.len(), plain.frames.len());
    for (cut, frame) in whole.frames.iter().zip(&plain.frames) {
        // One contiguous range removed, or nothing.
        let head = cut
            .iter()
            .zip(frame.iter())
            .take_while(|(a, b)| a == b)
            .count();
        assert!(
            frame.ends_with(&cut[head..]),
            "{cut:?} is not {frame:?} with one range removed"
        );
        if let Ok(event) = decode_event_without_managed_fields::<serde_json::Value>(frame) {
            let from_cut = decode_event_without_managed_fields::<serde_json::Value>(cut)
                .unwrap_or_else(|e| {
                    panic!("the cut frame {cut:?} is refused ({e}) where {frame:?} decodes")
                });
            assert_eq!(from_cut, event, "{cut:?}");
        }
    }
}
