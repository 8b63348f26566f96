use std::time::Duration;

use super::*;

/// A self-signed certificate for `name` and its key, as PEM.
fn pair(name: &str) -> (String, String) {
    let c = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
    (c.cert.pem(), c.signing_key.serialize_pem())
}

fn der_of(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

fn write(dir: &Path, (cert, key): &(String, String)) {
    std::fs::write(dir.join("tls.crt"), cert).unwrap();
    std::fs::write(dir.join("tls.key"), key).unwrap();
}

#[test]
fn a_changed_pair_is_served_and_a_bad_one_keeps_the_previous() {
    let dir = tempfile::tempdir().unwrap();
    let first = pair("first.example");
    write(dir.path(), &first);
    let w =
        CertWatcher::from_files(dir.path().join("tls.crt"), dir.path().join("tls.key")).unwrap();
    assert_eq!(w.current().cert[0], der_of(&first.0));
    assert!(!w.reload().unwrap(), "unchanged files are not reloaded");

    let second = pair("second.example");
    write(dir.path(), &second);
    assert!(w.reload().unwrap());
    assert_eq!(w.current().cert[0], der_of(&second.0));

    // A key of another certificate: refused, the second pair stays.
    let third = pair("third.example");
    write(dir.path(), &(third.0.clone(), first.1.clone()));
    let err = w.reload().unwrap_err().to_string();
    assert!(err.contains("are not usable"), "{err}");
    assert_eq!(w.current().cert[0], der_of(&second.0));
    // The same bad pair is not reported twice; a garbled certificate is reported.
    assert!(!w.reload().unwrap());
    std::fs::write(dir.path().join("tls.crt"), "garbage").unwrap();
    let err = w.reload().unwrap_err().to_string();
    assert!(err.contains("no CERTIFICATE block"), "{err}");
    assert_eq!(w.current().cert[0], der_of(&second.0));
}

#[test]
fn missing_or_bad_files_fail_at_start_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let err = CertWatcher::from_files(dir.path().join("tls.crt"), dir.path().join("tls.key"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("reading {}", dir.path().join("tls.crt").display())),
        "{err}"
    );
    let (cert, _) = pair("a");
    std::fs::write(dir.path().join("tls.crt"), &cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), "not a key").unwrap();
    let err = CertWatcher::from_files(dir.path().join("tls.crt"), dir.path().join("tls.key"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("parsing the key PEM"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn the_watch_loop_picks_up_a_rotation_at_its_next_poll() {
    let dir = tempfile::tempdir().unwrap();
    let first = pair("first.example");
    write(dir.path(), &first);
    let w = Arc::new(
        CertWatcher::from_files(dir.path().join("tls.crt"), dir.path().join("tls.key")).unwrap(),
    );
    let cancel = CancellationToken::new();
    let task = tokio::spawn(w.clone().watch(Duration::from_secs(10), cancel.clone()));
    tokio::task::yield_now().await;
    let second = pair("second.example");
    write(dir.path(), &second);
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(w.current().cert[0], der_of(&first.0), "not before the poll");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(w.current().cert[0], der_of(&second.0), "after the poll");
    cancel.cancel();
    task.await.unwrap();
}
