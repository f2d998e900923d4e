//! TLS for the tests: certificates made with the `openssl` command line
//! once per test process, and TLS-only redis-servers of our own, each on a
//! free loopback port, answered before use, killed when dropped. Never a
//! server on 6379.
//!
//! The certificates ([`pki`]):
//! - a private CA, and a server certificate it signed for `localhost` and
//!   `127.0.0.1`, the names the tests connect to;
//! - a second server certificate from the same CA for `wrong.example`, a
//!   name no test connects to (host-name checks);
//! - a client certificate from the CA (mutual TLS);
//! - an unrelated CA, and a client certificate it signed, that no server
//!   and no correctly set-up client trusts.
//!
//! Before a server is killed at the end of its test, the keyspace audit
//! (`lockattr_test_support::audit`, through `redis-cli`) fails the test
//! when a key has no TTL, as for the plain servers of `mod.rs`.
//!
//! Standard library and the workspace's test support only, so that a test
//! file can include it without `mod support`:
//! `#[path = "support/tls.rs"] mod tls;`.

#![allow(dead_code)] // each test file uses a part of this module

pub use lockattr_test_support::audit;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A certificate and its private key, both PEM.
pub struct Pem {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

/// Every certificate the TLS tests use (see the module docs).
pub struct Pki {
    /// The private CA that signed the servers' and the client's certificates.
    pub ca: Pem,
    /// Signed by `ca` for `DNS:localhost, IP:127.0.0.1`.
    pub server: Pem,
    /// Signed by `ca` for `DNS:wrong.example` only.
    pub wrong_name: Pem,
    /// A client certificate signed by `ca`.
    pub client: Pem,
    /// A CA that signed nothing any server presents.
    pub other_ca: Pem,
    /// A client certificate signed by `other_ca`: servers refuse it.
    pub stranger: Pem,
}

/// The certificates, made on first use (a few `openssl` runs, well under a
/// second) and kept in memory; the files they were made in are removed.
pub fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(make_pki)
}

fn make_pki() -> Pki {
    let dir = scratch_dir("pki");
    let ca = self_signed_ca(&dir, "ca", "lockattr test CA");
    let other_ca = self_signed_ca(&dir, "other-ca", "lockattr unrelated test CA");
    let server_ext = "basicConstraints = critical, CA:FALSE\n\
                      keyUsage = critical, digitalSignature\n\
                      extendedKeyUsage = serverAuth, clientAuth\n";
    let client_ext = "basicConstraints = critical, CA:FALSE\n\
                      keyUsage = critical, digitalSignature\n\
                      extendedKeyUsage = clientAuth\n";
    let server = signed(
        &dir,
        "server",
        "localhost",
        &format!("{server_ext}subjectAltName = DNS:localhost, IP:127.0.0.1\n"),
        "ca",
    );
    let wrong_name = signed(
        &dir,
        "wrong-name",
        "wrong.example",
        &format!("{server_ext}subjectAltName = DNS:wrong.example\n"),
        "ca",
    );
    let client = signed(&dir, "client", "lockattr test client", client_ext, "ca");
    let stranger = signed(
        &dir,
        "stranger",
        "lockattr stranger client",
        client_ext,
        "other-ca",
    );
    let _ = std::fs::remove_dir_all(&dir);
    Pki {
        ca,
        server,
        wrong_name,
        client,
        other_ca,
        stranger,
    }
}

/// A new P-256 key, PKCS#8 PEM (which both rustls and native-tls read),
/// without a passphrase.
const NEW_KEY: &str = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";

/// `<name>.crt` and `<name>.key` in `dir`: a new key and a self-signed CA
/// certificate for it.
fn self_signed_ca(dir: &Path, name: &str, common_name: &str) -> Pem {
    let config = config_file(
        dir,
        name,
        common_name,
        "basicConstraints = critical, CA:TRUE\n\
         keyUsage = critical, keyCertSign, cRLSign\n\
         subjectKeyIdentifier = hash\n",
    );
    openssl(
        dir,
        &format!(
            "req -x509 -config {config} -extensions ext {NEW_KEY} -days 30 \
             -keyout {name}.key -out {name}.crt"
        ),
    );
    read_pem(dir, name)
}

/// `<name>.crt` and `<name>.key` in `dir`: a new key and a certificate for
/// it with the extensions `ext`, signed by the CA `<ca>.crt`/`<ca>.key`.
fn signed(dir: &Path, name: &str, common_name: &str, ext: &str, ca: &str) -> Pem {
    let config = config_file(
        dir,
        name,
        common_name,
        &format!("{ext}subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid:always\n"),
    );
    openssl(
        dir,
        &format!("req -new -config {config} {NEW_KEY} -keyout {name}.key -out {name}.csr"),
    );
    openssl(
        dir,
        &format!(
            "x509 -req -in {name}.csr -CA {ca}.crt -CAkey {ca}.key -CAserial {ca}.srl \
             -CAcreateserial -days 30 -extfile {config} -extensions ext -out {name}.crt"
        ),
    );
    read_pem(dir, name)
}

/// An OpenSSL configuration of our own (the system's may add extensions):
/// the subject `CN = common_name`, and `ext` as the section `[ext]`.
fn config_file(dir: &Path, name: &str, common_name: &str, ext: &str) -> String {
    let file = format!("{name}.cnf");
    std::fs::write(
        dir.join(&file),
        format!(
            "[req]\ndistinguished_name = dn\nprompt = no\n\n\
             [dn]\nCN = {common_name}\n\n[ext]\n{ext}"
        ),
    )
    .expect("write an openssl config");
    file
}

/// Runs `openssl` in `dir` with `args`, split at white space (the file
/// names are ours, without spaces).
fn openssl(dir: &Path, args: &str) {
    let binary = std::env::var("OPENSSL").unwrap_or_else(|_| "openssl".into());
    let output = Command::new(&binary)
        .args(args.split_whitespace())
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{binary}` (install openssl): {e}"));
    assert!(
        output.status.success(),
        "`openssl {args}` failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn read_pem(dir: &Path, name: &str) -> Pem {
    let read = |ext: &str| {
        std::fs::read(dir.join(format!("{name}.{ext}")))
            .unwrap_or_else(|e| panic!("read {name}.{ext}: {e}"))
    };
    Pem {
        cert: read("crt"),
        key: read("key"),
    }
}

impl Pki {
    /// Every private key, for the checks that nothing shows one.
    fn keys(&self) -> [&[u8]; 6] {
        [
            &self.ca.key,
            &self.server.key,
            &self.wrong_name.key,
            &self.client.key,
            &self.other_ca.key,
            &self.stranger.key,
        ]
    }

    /// Every certificate.
    fn certs(&self) -> [&[u8]; 6] {
        [
            &self.ca.cert,
            &self.server.cert,
            &self.wrong_name.cert,
            &self.client.cert,
            &self.other_ca.cert,
            &self.stranger.cert,
        ]
    }

    /// What of a private key `text` shows, if anything: `PRIVATE KEY`, or
    /// 16 characters in a row of a key's base64 body.
    pub fn key_material_in(&self, text: &str) -> Option<String> {
        pem_in(text, &["PRIVATE KEY"], &self.keys())
    }

    /// What of any PEM, key or certificate, `text` shows, if anything: a
    /// PEM marker (`BEGIN`, `-----END`, `PRIVATE KEY`), or 16 characters in a
    /// row of a base64 body.
    pub fn pem_in(&self, text: &str) -> Option<String> {
        let mut all = self.keys().to_vec();
        all.extend(self.certs());
        pem_in(text, &["BEGIN", "-----END", "PRIVATE KEY"], &all)
    }
}

fn pem_in(text: &str, markers: &[&str], pems: &[&[u8]]) -> Option<String> {
    if let Some(marker) = markers.iter().find(|m| text.contains(*m)) {
        return Some(format!("`{marker}`"));
    }
    for pem in pems {
        let body: Vec<char> = String::from_utf8_lossy(pem)
            .lines()
            .filter(|line| !line.starts_with("-----"))
            .flat_map(str::chars)
            .collect();
        // Every 16-character window of the body: any run of 16 or more
        // characters of it shown anywhere is found.
        for window in body.windows(16) {
            let piece: String = window.iter().collect();
            if text.contains(&piece) {
                return Some(format!("base64 `{piece}` of a PEM body"));
            }
        }
    }
    None
}

/// A directory of our own under the system's temporary directory.
fn scratch_dir(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!(
        "lockattr-tls-test-{}-{what}-{n}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// How a [`TlsServer`] is set up.
pub struct TlsOptions<'a> {
    /// The certificate the server presents.
    pub cert: &'a Pem,
    /// `--tls-auth-clients yes`: clients must present a certificate signed
    /// by the private CA.
    pub auth_clients: bool,
    /// More command-line options.
    pub extra: &'a [&'a str],
}

/// A redis-server of our own that speaks TLS only (`--port 0`).
pub struct TlsServer {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    /// Keys the test wrote without a TTL on purpose ([`allow_untimed`](Self::allow_untimed)).
    allowed: audit::Allowed,
    /// The final audit ran (or was given up).
    audited: bool,
}

impl TlsServer {
    /// A server presenting the `localhost`/`127.0.0.1` certificate, clients
    /// not asked for one.
    pub fn start() -> TlsServer {
        Self::start_with(TlsOptions {
            cert: &pki().server,
            auth_clients: false,
            extra: &[],
        })
    }

    /// A server presenting the `localhost`/`127.0.0.1` certificate that
    /// requires a client certificate signed by the private CA.
    pub fn start_mutual() -> TlsServer {
        Self::start_with(TlsOptions {
            cert: &pki().server,
            auth_clients: true,
            extra: &[],
        })
    }

    /// A server presenting the certificate for `wrong.example`.
    pub fn start_wrong_name() -> TlsServer {
        Self::start_with(TlsOptions {
            cert: &pki().wrong_name,
            auth_clients: false,
            extra: &[],
        })
    }

    /// Starts a server on a free port and waits until it answers.
    pub fn start_with(options: TlsOptions<'_>) -> TlsServer {
        // A free port can be taken by another test process between
        // `free_port` and the server's bind: then try another one.
        let mut failures = Vec::new();
        for _ in 0..5 {
            let mut server = TlsServer {
                port: free_port(),
                child: None,
                dir: scratch_dir("server"),
                allowed: audit::Allowed::default(),
                audited: false,
            };
            match server.try_spawn(&options) {
                Ok(()) => return server,
                Err(e) => failures.push(e),
            }
        }
        panic!("cannot start a TLS redis-server: {failures:?}");
    }

    /// `rediss://localhost:<port>/`: a name the server's certificate has.
    pub fn url(&self) -> String {
        format!("rediss://localhost:{}/", self.port)
    }

    /// `rediss://127.0.0.1:<port>/`: an address the server's certificate has.
    pub fn ip_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.port)
    }

    fn try_spawn(&mut self, options: &TlsOptions<'_>) -> Result<(), String> {
        let pki = pki();
        for (file, pem) in [
            ("ca.crt", &pki.ca.cert),
            ("server.crt", &options.cert.cert),
            ("server.key", &options.cert.key),
            ("client.crt", &pki.client.cert),
            ("client.key", &pki.client.key),
        ] {
            std::fs::write(self.dir.join(file), pem).expect("write TLS files");
        }
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let dir = self.dir.to_str().expect("utf-8 temp dir").to_owned();
        let child = Command::new(&binary)
            .args(["--port", "0", "--tls-port", &self.port.to_string()])
            // `-::1`: also IPv6 loopback where there is one (`localhost`
            // may resolve to it).
            .args(["--bind", "127.0.0.1", "-::1"])
            .args(["--tls-cert-file", &format!("{dir}/server.crt")])
            .args(["--tls-key-file", &format!("{dir}/server.key")])
            .args(["--tls-ca-cert-file", &format!("{dir}/ca.crt")])
            .args([
                "--tls-auth-clients",
                if options.auth_clients { "yes" } else { "no" },
            ])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &dir, "--logfile", &format!("{dir}/redis.log")])
            .args(options.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{binary}` (install redis-server): {e}"));
        let pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            // Our process must be the one answering: a server that could not
            // bind the port exits, and someone else's may be listening there.
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(format!(
                    "redis-server on TLS port {} exited at start ({status}); was the port taken? \
                     log: {}",
                    self.port,
                    self.log()
                ));
            }
            if self
                .try_cli(&["INFO", "server"])
                .is_some_and(|r| r.contains(&format!("process_id:{pid}\r\n")))
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = self.log();
        self.kill();
        panic!(
            "TLS redis-server on port {} did not answer within 10 s; log: {log}",
            self.port
        );
    }

    /// The server's log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// Runs one command with `redis-cli` over TLS (trusting the private CA,
    /// with the client certificate) and returns its output, trimmed.
    /// Panics when `redis-cli` fails or takes more than 5 s.
    pub fn cli(&self, args: &[&str]) -> String {
        self.cli_within(args, Duration::from_secs(5))
    }

    /// [`cli`](Self::cli) for a command that may take longer, such as
    /// `--cluster create` (it waits for the nodes to agree) on a loaded
    /// machine: panics when it fails or takes more than `within`.
    pub fn cli_within(&self, args: &[&str], within: Duration) -> String {
        self.try_cli_within(args, within).unwrap_or_else(|| {
            panic!(
                "`redis-cli {}` on TLS port {} failed; server log: {}",
                args.join(" "),
                self.port,
                self.log()
            )
        })
    }

    fn try_cli(&self, args: &[&str]) -> Option<String> {
        self.try_cli_within(args, Duration::from_secs(5))
    }

    fn try_cli_within(&self, args: &[&str], within: Duration) -> Option<String> {
        let dir = self.dir.to_str().expect("utf-8 temp dir");
        let binary = std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into());
        let child = Command::new(&binary)
            .args(["--tls", "--cacert", &format!("{dir}/ca.crt")])
            .args(["--cert", &format!("{dir}/client.crt")])
            .args(["--key", &format!("{dir}/client.key")])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `{binary}` (install redis-tools): {e}"));
        let output = wait_output(child, within)?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        // redis-cli exits 0 on a connection failure too, saying so on stderr.
        (output.status.success() && output.stderr.is_empty()).then(|| stdout.trim().to_owned())
    }

    /// True when `key` exists on the server.
    pub fn exists(&self, key: &str) -> bool {
        match self.cli(&["EXISTS", key]).as_str() {
            "1" => true,
            "0" => false,
            other => panic!("EXISTS {key}: {other}"),
        }
    }

    /// Kills the server.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---- The keyspace audit (see `audit.rs`). ----

impl TlsServer {
    /// Lets keys matching `pattern` (Redis glob: `*`, `?`, `\` escapes)
    /// have no TTL when the server is audited: for keys this test writes
    /// itself without a TTL on purpose, never for keys lockattr writes.
    pub fn allow_untimed(&self, pattern: &str) {
        self.allowed.add(pattern);
    }

    /// The keyspace audit now: the keys without a TTL, in every database,
    /// that are neither documented exceptions nor allowed; `Err` when it
    /// could not run.
    pub fn audit(&self) -> Result<Vec<audit::UntimedKey>, String> {
        let out = self
            .try_cli_within(&["EVAL", audit::SCRIPT, "0"], Duration::from_secs(10))
            .ok_or_else(|| "redis-cli could not run the audit script".to_owned())?;
        let found = audit::parse_lines(out.lines())
            .map_err(|e| format!("{e}; redis-cli answered: {out}"))?;
        Ok(audit::unexpected(found, &self.allowed.patterns()))
    }

    /// The audit at the server's final stop, once: the failure message, if
    /// any. Nothing when the test is already failing or the server is not
    /// running (the test killed it).
    fn final_audit(&mut self) -> Option<String> {
        if std::mem::replace(&mut self.audited, true) || std::thread::panicking() {
            return None;
        }
        if !matches!(self.child.as_mut()?.try_wait(), Ok(None)) {
            return None;
        }
        let server = format!("TLS redis-server on port {}", self.port);
        match self.audit() {
            Ok(keys) if keys.is_empty() => None,
            Ok(keys) => Some(audit::report(&server, &keys)),
            Err(why) => Some(audit::refused(&server, &why)),
        }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        // Audited before the kill; the failure raised after it.
        let finding = self.final_audit();
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(finding) = finding {
            panic!("{finding}");
        }
    }
}

/// The output of `child`, or `None` (and the child killed) after `within`.
fn wait_output(mut child: Child, within: Duration) -> Option<Output> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().ok(),
            Ok(None) if start.elapsed() < within => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}
