//! The CLI over TLS: `--tls-ca`, `--tls-cert` and `--tls-key` against
//! redis-server nodes that serve TLS only and require a client certificate.

use std::time::Duration;

use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::tls::TestPki;
use redlease_testkit::{ClientAuth, NodeConfig, RedisNode, RedisNodes};

use crate::support::{redlease, run};

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn run_status_and_release_work_over_mutual_tls() {
    let pki = TestPki::generate();
    let nodes = RedisNodes::start_with(3, NodeConfig::new().tls(&pki, ClientAuth::Required));
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = pki.write_client_files(dir.path());
    let urls = nodes.urls().join(",");
    assert!(urls.starts_with("rediss://"), "{urls}");
    let tls = [
        "--tls-ca",
        ca.to_str().unwrap(),
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];

    let ran = run(
        redlease()
            .args(["run", "--nodes", &urls, "--key", "tls-job"])
            .args(tls)
            .args(["--", "sh", "-c", "echo token=$REDLEASE_FENCING_TOKEN"]),
        LIMIT,
    );
    ran.expect(0);
    assert!(ran.stdout.contains("token=1"), "{ran:#?}");

    let status = run(
        redlease()
            .args(["status", "--nodes", &urls, "--key", "tls-job"])
            .args(tls),
        LIMIT,
    );
    status.expect(0);
    assert!(status.stdout.contains("FREE"), "{status:#?}");
    assert!(status.stdout.contains("fencing counter 1"), "{status:#?}");

    let released = run(
        redlease()
            .args(["release", "--force", "--nodes", &urls, "--key", "tls-job"])
            .args(tls),
        LIMIT,
    );
    released.expect(0);

    // Without the client certificate the servers refuse the handshake: the
    // command does not run, and the message says it is a certificate problem.
    let refused = run(
        redlease()
            .args(["run", "--nodes", &urls, "--key", "tls-job", "--no-wait"])
            .args(["--tls-ca", ca.to_str().unwrap()])
            .args(["--", "echo", "ran"]),
        LIMIT,
    );
    assert_ne!(refused.code(), 0, "{refused:#?}");
    assert!(!refused.stdout.contains("ran"), "{refused:#?}");
    assert!(
        refused.stderr.contains("certificate problem"),
        "{refused:#?}"
    );

    // A CA file that does not exist is a usage error before any I/O.
    let missing = run(
        redlease()
            .args(["status", "--nodes", &urls, "--key", "tls-job"])
            .args(["--tls-ca", "/nonexistent/ca.crt"]),
        LIMIT,
    );
    missing.expect(2);
    assert!(
        missing.one_line_error().contains("/nonexistent/ca.crt"),
        "{missing:#?}"
    );
}

#[test]
fn doctor_checks_tls_nodes_with_the_same_flags() {
    let pki = TestPki::generate();
    let nodes = RedisNodes::start_with(1, NodeConfig::new().tls(&pki, ClientAuth::Required));
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = pki.write_client_files(dir.path());
    let out = run(
        redlease()
            .args([
                "doctor",
                "--nodes",
                &nodes.urls().join(","),
                "--timeout",
                "2s",
            ])
            .args(["--tls-ca", ca.to_str().unwrap()])
            .args(["--tls-cert", cert.to_str().unwrap()])
            .args(["--tls-key", key.to_str().unwrap()]),
        LIMIT,
    );
    let reachable = out
        .stdout
        .lines()
        .find(|l| l.contains("reachable"))
        .unwrap_or_else(|| panic!("a reachability row: {out:#?}"));
    assert!(reachable.starts_with("OK"), "{reachable}");
}

/// A server certificate the client does not trust: `status` gives the
/// TLS library's reason once, and doctor the same certificate advice as
/// `run` and `status` (not "start the server").
#[test]
fn an_untrusted_certificate_is_told_once_with_the_certificate_advice() {
    let pki = TestPki::generate();
    let nodes = RedisNodes::start_with(1, NodeConfig::new().tls(&pki, ClientAuth::None));
    let urls = nodes.urls().join(",");
    let status = run(
        redlease().args([
            "status",
            "--nodes",
            &urls,
            "--key",
            "job",
            "--timeout",
            "2s",
        ]),
        LIMIT,
    );
    status.expect(69);
    assert_eq!(
        status.stdout.matches("UnknownIssuer").count(),
        1,
        "{status:#?}"
    );
    assert!(status.stdout.contains("check the CA"), "{status:#?}");

    let out = run(
        redlease().args(["doctor", "--nodes", &urls, "--timeout", "2s"]),
        LIMIT,
    );
    out.expect(1);
    assert!(
        out.stdout.contains("fix: check the CA the client trusts"),
        "{out:#?}"
    );
    assert!(!out.stdout.contains("start the server"), "{out:#?}");
}

/// `rediss+cluster://` with `--tls-ca`: the CA reaches every node of the
/// cluster. Without it, `status` names the certificate problem, not a
/// cluster connection that was not found, and `doctor` gives the
/// certificate advice.
#[test]
fn run_and_status_work_on_a_tls_cluster_with_a_private_ca() {
    let pki = TestPki::generate();
    let cluster = RedisCluster::start_tls(3, 0, &pki, ClientAuth::None);
    let dir = tempfile::tempdir().unwrap();
    let (ca, _, _) = pki.write_client_files(dir.path());
    let url = cluster.cluster_url();
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    let ca = ["--tls-ca", ca.to_str().unwrap()];

    let ran = run(
        redlease()
            .args(["run", "--nodes", &url, "--key", "tls-cluster-job"])
            .args(ca)
            .args(["--", "sh", "-c", "echo token=$REDLEASE_FENCING_TOKEN"]),
        LIMIT,
    );
    ran.expect(0);
    assert!(ran.stdout.contains("token=1"), "{ran:#?}");

    let status = run(
        redlease()
            .args(["status", "--nodes", &url, "--key", "tls-cluster-job"])
            .args(ca),
        LIMIT,
    );
    status.expect(0);
    assert!(status.stdout.contains("FREE"), "{status:#?}");
    assert!(status.stdout.contains("fencing counter 1"), "{status:#?}");

    let untrusted = run(
        redlease().args(["status", "--nodes", &url, "--key", "tls-cluster-job"]),
        LIMIT,
    );
    assert_ne!(untrusted.code(), 0, "{untrusted:#?}");
    let shown = format!("{}{}", untrusted.stdout, untrusted.stderr);
    assert!(shown.contains("UnknownIssuer"), "{untrusted:#?}");
    assert!(
        !shown.contains("ClusterConnectionNotFound"),
        "{untrusted:#?}"
    );

    // doctor gives the certificate advice for a cluster whose seeds all
    // refuse the handshake, told by the TLS library's error type.
    let doctor = run(
        redlease().args(["doctor", "--nodes", &url, "--timeout", "2s"]),
        LIMIT,
    );
    doctor.expect(1);
    assert!(
        doctor
            .stdout
            .contains("fix: check the CA the client trusts"),
        "{doctor:#?}"
    );
}

/// A TLS port given as `redis://`, and a plain port given as `rediss://`:
/// `run`, `status` and `doctor` name the scheme to use.
#[test]
fn a_scheme_that_does_not_match_the_port_is_named_with_the_fix() {
    let pki = TestPki::generate();
    let tls = RedisNode::start_with(NodeConfig::new().tls(&pki, ClientAuth::None));
    let plain = RedisNode::start();
    let cases = [
        (format!("redis://{}", tls.addr()), "use rediss://"),
        (format!("rediss://{}", plain.addr()), "use redis://"),
    ];
    for (url, fix) in cases {
        let ran = run(
            redlease()
                .args(["run", "--nodes", &url, "--key", "scheme", "--no-wait"])
                .args(["--", "echo", "ran"]),
            LIMIT,
        );
        assert_ne!(ran.code(), 0, "{ran:#?}");
        assert!(!ran.stdout.contains("ran"), "{ran:#?}");
        assert!(ran.stderr.contains(fix), "{url}: {ran:#?}");

        let status = run(
            redlease().args(["status", "--nodes", &url, "--key", "scheme"]),
            LIMIT,
        );
        let shown = format!("{}{}", status.stdout, status.stderr);
        assert!(shown.contains(fix), "{url}: {status:#?}");

        let doctor = run(
            redlease().args(["doctor", "--nodes", &url, "--timeout", "2s"]),
            LIMIT,
        );
        doctor.expect(1);
        let reachable = doctor
            .stdout
            .lines()
            .skip_while(|l| !l.contains("reachable"))
            .take(3)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(reachable.starts_with("FAIL"), "{url}: {doctor:#?}");
        let fix_line = doctor
            .stdout
            .lines()
            .find(|l| l.contains("fix:"))
            .unwrap_or_else(|| panic!("{url}: a fix line: {doctor:#?}"));
        assert!(fix_line.contains(fix), "{url}: {fix_line}");
        assert!(!fix_line.contains("start the server"), "{url}: {fix_line}");
    }
}
