//! Random UUIDs, for what a client names or identifies itself (event names that cannot be
//! derived from the object, leader-election identities, the fake API server's object `uid`s).

/// A random version-4 UUID (RFC 4122 §4.4, RFC 9562 §5.4) in its canonical lowercase form,
/// `xxxxxxxx-xxxx-4xxx-Nxxx-xxxxxxxxxxxx` with `N` one of `8`, `9`, `a`, `b`.
///
/// The 122 random bits come from `fastrand`, which is fast and not cryptographically secure:
/// these UUIDs keep names apart, they are not secrets.
///
/// ```
/// let id = kctrl_client::uuid::new_v4();
/// assert_eq!(id.len(), 36);
/// assert_eq!(&id[14..15], "4");
/// ```
pub fn new_v4() -> String {
    format_v4(fastrand::u128(..))
}

/// `random` with the version (4) and variant (`10`) bits set, as 8-4-4-4-12 lowercase hex.
fn format_v4(random: u128) -> String {
    let mut bytes = random.to_be_bytes();
    // Octet 6: the high nibble is the version.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    // Octet 8: the two high bits are the variant, 0b10.
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = format!("{:032x}", u128::from_be_bytes(bytes));
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The version nibble and the two variant bits of a canonical UUID string, checked
    /// against its textual form rather than the code that set them.
    fn version_and_variant(id: &str) -> (u8, u8) {
        let groups: Vec<&str> = id.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12],
            "{id}"
        );
        assert!(
            id.bytes()
                .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{id}"
        );
        let version = u8::from_str_radix(&groups[2][..1], 16).unwrap();
        let variant = u8::from_str_radix(&groups[3][..1], 16).unwrap() >> 2;
        (version, variant)
    }

    #[test]
    fn random_uuids_are_version_4_variant_rfc4122() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1_000 {
            let id = new_v4();
            assert_eq!(version_and_variant(&id), (4, 0b10), "{id}");
            assert!(seen.insert(id), "a repeated UUID");
        }
    }

    #[test]
    fn only_the_version_and_variant_bits_are_overwritten() {
        assert_eq!(format_v4(0), "00000000-0000-4000-8000-000000000000");
        assert_eq!(format_v4(u128::MAX), "ffffffff-ffff-4fff-bfff-ffffffffffff");
        assert_eq!(
            format_v4(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
            "01234567-89ab-4def-8123-456789abcdef"
        );
    }
}
