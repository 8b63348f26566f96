//! Protobuf's wire format read straight from a byte slice and written into one, for the
//! generated decoders and encoders of whole objects ([`objects`](super::objects)).
//!
//! The generated code reads each field into k8s-openapi's types as it comes, with no
//! intermediate message structs; this module is the little it needs: keys, varints,
//! length-delimited fields, skipping, and the four apimachinery types that are messages in
//! protobuf but scalars in k8s-openapi (`Quantity`, `IntOrString`, `Time`).
//! prost's own primitives are internal to its generated code, hence this reader; its errors
//! name the object and the field being read.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::ProtobufError;

/// Wire type of varints.
const VARINT: u8 = 0;
/// Wire type of 8-byte values.
const FIXED64: u8 = 1;
/// Wire type of length-delimited values (strings, bytes, messages, packed lists).
const LEN: u8 = 2;
/// Wire type of 4-byte values.
const FIXED32: u8 = 5;

/// A cursor over one message's fields.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    /// The type of the object being decoded, for errors.
    object: &'static str,
    /// The number of the field being read, for errors.
    field: u32,
}

type Result<T> = std::result::Result<T, ProtobufError>;

impl<'a> Reader<'a> {
    /// A reader of the message `buf`, part of an object of type `object`.
    pub(crate) fn new(buf: &'a [u8], object: &'static str) -> Self {
        Self {
            buf,
            object,
            field: 0,
        }
    }

    fn error(&self, reason: &'static str) -> ProtobufError {
        ProtobufError::Malformed {
            message: self.object,
            field: self.field,
            reason,
        }
    }

    /// The next field's number and wire type, `None` at the end of the message.
    pub(crate) fn field(&mut self) -> Result<Option<(u32, u8)>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| self.error("field number too large"))?;
        if field == 0 {
            return Err(self.error("field number 0"));
        }
        self.field = field;
        Ok(Some((field, (key & 7) as u8)))
    }

    fn varint(&mut self) -> Result<u64> {
        // Most varints (keys, lengths of short strings, small numbers) are one byte.
        if let Some((&byte, rest)) = self.buf.split_first()
            && byte < 0x80
        {
            self.buf = rest;
            return Ok(u64::from(byte));
        }
        let mut value = 0u64;
        for (i, &byte) in self.buf.iter().take(10).enumerate() {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                self.buf = &self.buf[i + 1..];
                return Ok(value);
            }
        }
        Err(self.error(if self.buf.len() < 10 {
            "truncated varint"
        } else {
            "varint longer than 10 bytes"
        }))
    }

    fn expect(&self, wire: u8, want: u8) -> Result<()> {
        if wire == want {
            Ok(())
        } else {
            Err(self.error("unexpected wire type"))
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.buf.len() {
            return Err(self.error("field runs past the end of its message"));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// A length-delimited value.
    fn bytes(&mut self, wire: u8) -> Result<&'a [u8]> {
        self.expect(wire, LEN)?;
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| self.error("length too large"))?;
        self.take(len)
    }

    /// A string (UTF-8 checked, as Go's decoder does not but JSON's does).
    pub(crate) fn string(&mut self, wire: u8) -> Result<String> {
        let bytes = self.bytes(wire)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(self.error("string is not UTF-8")),
        }
    }

    /// An `int32` (sent sign-extended to 64 bits when negative).
    pub(crate) fn int32(&mut self, wire: u8) -> Result<i32> {
        self.expect(wire, VARINT)?;
        // Truncation is the protobuf rule for int32.
        Ok(self.varint()? as i32)
    }

    /// An `int64`.
    pub(crate) fn int64(&mut self, wire: u8) -> Result<i64> {
        self.expect(wire, VARINT)?;
        Ok(self.varint()? as i64)
    }

    /// A `bool`.
    pub(crate) fn bool(&mut self, wire: u8) -> Result<bool> {
        self.expect(wire, VARINT)?;
        Ok(self.varint()? != 0)
    }

    /// An embedded message.
    pub(crate) fn message(&mut self, wire: u8) -> Result<Reader<'a>> {
        let buf = self.bytes(wire)?;
        Ok(Reader {
            buf,
            object: self.object,
            field: 0,
        })
    }

    /// Skips a field this decoder does not keep.
    pub(crate) fn skip(&mut self, wire: u8) -> Result<()> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.bytes(wire).map(drop),
            FIXED32 => self.take(4).map(drop),
            _ => Err(self.error("unsupported wire type (groups)")),
        }
    }

    /// One element of a repeated `int32`, or a packed run of them.
    // Read only by fields of Kubernetes 1.34 and later (a container's restart rules).
    #[cfg_attr(not(k8s_api_ge = "1.34"), allow(dead_code))]
    pub(crate) fn int32s(&mut self, wire: u8, out: &mut Option<Vec<i32>>) -> Result<()> {
        // Truncation is the protobuf rule for int32.
        self.varints(wire, out, |v| v as i32)
    }

    /// One element of a repeated `int64`, or a packed run of them.
    pub(crate) fn int64s(&mut self, wire: u8, out: &mut Option<Vec<i64>>) -> Result<()> {
        self.varints(wire, out, |v| v as i64)
    }

    /// One varint of a repeated field, or a packed run of them, each converted by `from`.
    fn varints<T>(
        &mut self,
        wire: u8,
        out: &mut Option<Vec<T>>,
        from: impl Fn(u64) -> T,
    ) -> Result<()> {
        let out = out.get_or_insert_with(Vec::new);
        if wire == LEN {
            let mut packed = self.message(wire)?;
            while !packed.buf.is_empty() {
                super::push(out, from(packed.varint()?));
            }
        } else {
            self.expect(wire, VARINT)?;
            super::push(out, from(self.varint()?));
        }
        Ok(())
    }

    /// One entry of a map field: key (1) and value (2), read with `value`; a missing value
    /// is its type's default, as in Go.
    pub(crate) fn entry<V: Default>(
        &mut self,
        wire: u8,
        value: impl Fn(&mut Reader<'a>, u8) -> Result<V>,
    ) -> Result<(String, V)> {
        let mut entry = self.message(wire)?;
        let (mut k, mut v) = (String::new(), V::default());
        while let Some((field, wire)) = entry.field()? {
            match field {
                1 => k = entry.string(wire)?,
                2 => v = value(&mut entry, wire)?,
                _ => entry.skip(wire)?,
            }
        }
        Ok((k, v))
    }
}

/// `resource.Quantity`: its canonical text (field 1), as JSON writes it.
pub(crate) fn quantity(mut r: Reader<'_>) -> Result<Quantity> {
    let mut text = String::new();
    while let Some((field, wire)) = r.field()? {
        match field {
            1 => text = r.string(wire)?,
            _ => r.skip(wire)?,
        }
    }
    Ok(Quantity(text))
}

/// `intstr.IntOrString`: type (1; 1 is a string), intVal (2), strVal (3).
pub(crate) fn int_or_string(mut r: Reader<'_>) -> Result<IntOrString> {
    let (mut kind, mut int, mut string) = (0, 0, String::new());
    while let Some((field, wire)) = r.field()? {
        match field {
            1 => kind = r.int64(wire)?,
            2 => int = r.int32(wire)?,
            3 => string = r.string(wire)?,
            _ => r.skip(wire)?,
        }
    }
    Ok(if kind == 1 {
        IntOrString::String(string)
    } else {
        IntOrString::Int(int)
    })
}

/// Seconds (1) and nanoseconds (2) of a `Timestamp`; `None` for an empty message, which is
/// how the zero time is sent (and JSON writes it as `null`).
fn timestamp(mut r: Reader<'_>) -> Result<Option<(i64, i32)>> {
    if r.buf.is_empty() {
        return Ok(None);
    }
    let (mut seconds, mut nanos) = (0, 0);
    while let Some((field, wire)) = r.field()? {
        match field {
            1 => seconds = r.int64(wire)?,
            2 => nanos = r.int32(wire)?,
            _ => r.skip(wire)?,
        }
    }
    Ok(Some((seconds, nanos)))
}

/// `metav1.Time`, to the second (apimachinery drops nanoseconds, as its JSON has none).
pub(crate) fn time(r: Reader<'_>) -> Result<Option<Time>> {
    let object = r.object;
    let Some((seconds, _)) = timestamp(r)? else {
        return Ok(None);
    };
    Timestamp::from_second(seconds)
        .map(|t| Some(Time(t)))
        .map_err(|_| out_of_range(object))
}

fn out_of_range(object: &'static str) -> ProtobufError {
    ProtobufError::Malformed {
        message: object,
        field: 1,
        reason: "time out of range",
    }
}

/// A message being written, fields in the order they are given.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
    /// Whether the value held something this writer does not encode (managedFields).
    unsupported: bool,
}

impl Writer {
    /// A writer whose output starts with `prefix`, with room for `capacity` bytes.
    pub(crate) fn with_prefix(prefix: &[u8], capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(prefix.len() + capacity);
        buf.extend_from_slice(prefix);
        Self {
            buf,
            unsupported: false,
        }
    }

    /// What was written, whatever [`unsupported`](Self::unsupported) says.
    pub(crate) fn into_inner(self) -> Vec<u8> {
        self.buf
    }

    /// The message, or `None` if [`unsupported`](Self::unsupported) was called.
    pub(crate) fn finish(self) -> Option<Vec<u8>> {
        (!self.unsupported).then_some(self.buf)
    }

    /// Marks the message as one that must be sent another way.
    pub(crate) fn unsupported(&mut self) {
        self.unsupported = true;
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }

    /// A string field.
    pub(crate) fn string(&mut self, field: u32, v: &str) {
        self.bytes(field, v.as_bytes());
    }

    /// A bytes field.
    pub(crate) fn bytes(&mut self, field: u32, v: &[u8]) {
        self.key(field, LEN);
        self.varint(v.len() as u64);
        self.buf.extend_from_slice(v);
    }

    /// An `int32` field (a negative value sign-extended to ten bytes, as protobuf says).
    pub(crate) fn int32(&mut self, field: u32, v: i32) {
        self.int64(field, i64::from(v));
    }

    /// An `int64` field.
    pub(crate) fn int64(&mut self, field: u32, v: i64) {
        self.key(field, VARINT);
        self.varint(v as u64);
    }

    /// A `bool` field.
    pub(crate) fn bool(&mut self, field: u32, v: bool) {
        self.key(field, VARINT);
        self.varint(u64::from(v));
    }

    /// An embedded message, written by `f`. Its length goes before it: one byte is kept for
    /// it, and the message moved when its length needs more.
    pub(crate) fn message(&mut self, field: u32, f: impl FnOnce(&mut Writer)) {
        self.key(field, LEN);
        let at = self.buf.len();
        self.buf.push(0);
        f(self);
        let len = self.buf.len() - at - 1;
        if len < 0x80 {
            self.buf[at] = len as u8;
        } else {
            let mut prefix = Writer::default();
            prefix.varint(len as u64);
            self.buf.splice(at..=at, prefix.buf);
        }
    }
}

/// A `resource.Quantity` field.
pub(crate) fn write_quantity(w: &mut Writer, field: u32, q: &Quantity) {
    w.message(field, |w| w.string(1, &q.0));
}

/// An `intstr.IntOrString` field.
pub(crate) fn write_int_or_string(w: &mut Writer, field: u32, v: &IntOrString) {
    w.message(field, |w| match v {
        IntOrString::Int(i) => {
            w.int64(1, 0);
            w.int32(2, *i);
        }
        IntOrString::String(s) => {
            w.int64(1, 1);
            w.string(3, s);
        }
    });
}

/// A `metav1.Time` field, to the second.
pub(crate) fn write_time(w: &mut Writer, field: u32, t: &Time) {
    w.message(field, |w| w.int64(1, t.0.as_second()));
}

/// `None` for a zero value: what JSON leaves out of a field tagged `omitempty`.
pub(crate) fn nonzero<T: Default + PartialEq>(value: T) -> Option<T> {
    (value != T::default()).then_some(value)
}

/// Appends to an optional list (short lists sized exactly: see [`super::push`]).
pub(crate) fn push<T>(list: &mut Option<Vec<T>>, value: T) {
    super::push(list.get_or_insert_with(Vec::new), value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(buf: &[u8]) -> Reader<'_> {
        Reader::new(buf, "Test")
    }

    #[test]
    fn varints_of_every_length_and_sign() {
        for value in [0u64, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut buf = Vec::new();
            let mut v = value;
            loop {
                let byte = (v & 0x7f) as u8;
                v >>= 7;
                if v == 0 {
                    buf.push(byte);
                    break;
                }
                buf.push(byte | 0x80);
            }
            buf.push(0x2a);
            let mut r = reader(&buf);
            assert_eq!(r.varint().unwrap(), value);
            // The next varint starts right after this one.
            assert_eq!(r.varint().unwrap(), 0x2a, "after {value}");
            assert!(r.buf.is_empty());
        }
        // -1 as an int32 is sent as ten bytes.
        let minus_one = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(reader(&minus_one).int32(VARINT).unwrap(), -1);
    }

    #[test]
    fn malformed_input_is_an_error_naming_the_field() {
        // Field 3, length 5, but only 2 bytes follow.
        let mut r = reader(&[0x1a, 0x05, b'a', b'b']);
        let (field, wire) = r.field().unwrap().unwrap();
        assert_eq!((field, wire), (3, LEN));
        let err = r.string(wire).unwrap_err();
        assert_eq!(
            err.to_string(),
            "malformed protobuf Test: at field 3: field runs past the end of its message"
        );
        assert!(reader(&[0x80]).varint().is_err());
        assert!(reader(&[0x00]).field().is_err());
        // A varint where a string is expected.
        let mut r = reader(&[0x08, 0x01]);
        let (_, wire) = r.field().unwrap().unwrap();
        assert!(r.string(wire).is_err());
        // Invalid UTF-8.
        let mut r = reader(&[0x0a, 0x01, 0xff]);
        let (_, wire) = r.field().unwrap().unwrap();
        assert!(r.string(wire).is_err());
        // Groups are refused.
        let mut r = reader(&[0x0b]);
        let (_, wire) = r.field().unwrap().unwrap();
        assert!(r.skip(wire).is_err());
    }

    #[test]
    fn every_wire_type_is_skipped() {
        let buf = [
            0x08, 0x96, 0x01, // 1: varint 150
            0x11, 1, 2, 3, 4, 5, 6, 7, 8, // 2: fixed64
            0x1a, 0x02, b'h', b'i', // 3: bytes
            0x25, 1, 2, 3, 4, // 4: fixed32
        ];
        let mut r = reader(&buf);
        let mut seen = Vec::new();
        while let Some((field, wire)) = r.field().unwrap() {
            seen.push(field);
            r.skip(wire).unwrap();
        }
        assert_eq!(seen, [1, 2, 3, 4]);
    }

    #[test]
    fn packed_and_unpacked_repeated_ints() {
        let mut out = None;
        reader(&[0x01]).int64s(VARINT, &mut out).unwrap();
        let mut r = reader(&[0x03, 0x02, 0x96, 0x01]);
        r.int64s(LEN, &mut out).unwrap();
        assert_eq!(out, Some(vec![1, 2, 150]));
    }

    #[test]
    fn apimachinery_scalars() {
        assert_eq!(
            quantity(reader(&[0x0a, 0x04, b'1', b'0', b'0', b'm'])).unwrap(),
            Quantity("100m".into())
        );
        assert_eq!(
            int_or_string(reader(&[0x08, 0x01, 0x1a, 0x03, b'2', b'5', b'%'])).unwrap(),
            IntOrString::String("25%".into())
        );
        assert_eq!(
            int_or_string(reader(&[0x10, 0x03])).unwrap(),
            IntOrString::Int(3)
        );
        // The zero time is an empty message; the epoch itself is not.
        assert_eq!(time(reader(&[])).unwrap(), None);
        assert_eq!(
            time(reader(&[0x08, 0x00])).unwrap(),
            Some(Time(Timestamp::UNIX_EPOCH))
        );
        // Nanoseconds are dropped, as apimachinery does.
        let t = [0x08, 0x0a, 0x10, 0xc7, 0x84, 0x3d]; // 10 s, 1_000_007 ns
        assert_eq!(
            time(reader(&t)).unwrap(),
            Some(Time(Timestamp::from_second(10).unwrap()))
        );
    }

    #[test]
    fn written_values_read_back() {
        let mut w = Writer::default();
        w.string(1, "héllo");
        w.int32(2, -1);
        w.int64(3, 1 << 40);
        w.bool(4, true);
        // Long enough that its length takes two bytes.
        let long = "x".repeat(300);
        w.message(5, |w| w.string(1, &long));
        write_quantity(&mut w, 6, &Quantity("250m".into()));
        write_int_or_string(&mut w, 7, &IntOrString::String("25%".into()));
        write_int_or_string(&mut w, 8, &IntOrString::Int(0));
        write_time(
            &mut w,
            9,
            &Time(Timestamp::from_second(1_700_000_000).unwrap()),
        );
        let buf = w.finish().unwrap();
        let mut r = reader(&buf);
        let next = |r: &mut Reader<'_>| r.field().unwrap().unwrap();
        let (_, wire) = next(&mut r);
        assert_eq!(r.string(wire).unwrap(), "héllo");
        let (_, wire) = next(&mut r);
        assert_eq!(r.int32(wire).unwrap(), -1);
        let (_, wire) = next(&mut r);
        assert_eq!(r.int64(wire).unwrap(), 1 << 40);
        let (_, wire) = next(&mut r);
        assert!(r.bool(wire).unwrap());
        let (_, wire) = next(&mut r);
        let mut inner = r.message(wire).unwrap();
        let (_, iw) = inner.field().unwrap().unwrap();
        assert_eq!(inner.string(iw).unwrap(), long);
        let (_, wire) = next(&mut r);
        assert_eq!(
            quantity(r.message(wire).unwrap()).unwrap(),
            Quantity("250m".into())
        );
        let (_, wire) = next(&mut r);
        assert_eq!(
            int_or_string(r.message(wire).unwrap()).unwrap(),
            IntOrString::String("25%".into())
        );
        let (_, wire) = next(&mut r);
        assert_eq!(
            int_or_string(r.message(wire).unwrap()).unwrap(),
            IntOrString::Int(0)
        );
        let (field, wire) = next(&mut r);
        assert_eq!(field, 9);
        assert_eq!(
            time(r.message(wire).unwrap()).unwrap(),
            Some(Time(Timestamp::from_second(1_700_000_000).unwrap()))
        );
        assert!(r.field().unwrap().is_none());

        let mut w = Writer::default();
        w.unsupported();
        assert!(w.finish().is_none());
    }

    #[test]
    fn map_entries_default_a_missing_value() {
        let mut r = reader(&[0x0a, 0x03, 0x0a, 0x01, b'k']);
        let (_, wire) = r.field().unwrap().unwrap();
        let (k, v) = r.entry(wire, |r, w| r.string(w)).unwrap();
        assert_eq!((k.as_str(), v.as_str()), ("k", ""));
        assert_eq!(nonzero(String::new()), None);
        assert_eq!(nonzero(0), None);
        assert_eq!(nonzero(false), None);
        assert_eq!(nonzero(3), Some(3));
    }
}
