//! A real registry for pull tests: Debian's `docker-registry` serving on
//! 127.0.0.1 inside a test's network namespace, images pushed to it with
//! `skopeo` from OCI layouts the test writes, its access log read to count
//! blob downloads. Stopped (by its pid) and removed on drop.

use std::fs;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::TestEnv;

pub mod proxy;

pub struct Registry {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    pub log: PathBuf,
    netns: String,
}

/// Runs `work` on a thread inside the network namespace `netns`.
pub fn in_netns<T: Send + 'static>(netns: &str, work: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{netns}");
    std::thread::spawn(move || {
        let ns = fs::File::open(&path).expect("opening the netns");
        nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        work()
    })
    .join()
    .expect("netns thread")
}

/// Waits until something listens on 127.0.0.1:`port` in `netns`.
pub fn wait_listening(netns: &str, port: u16) {
    let ready = in_netns(netns, move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    });
    assert!(ready, "nothing listens on 127.0.0.1:{port} in {netns}");
}

impl Registry {
    /// Starts a registry on 127.0.0.1:`port` in the env's netns; with
    /// `htpasswd`, it requires basic auth with those users.
    pub fn start(env: &TestEnv, name: &str, port: u16, htpasswd: Option<&Path>) -> Self {
        let auth = htpasswd
            .map(|p| format!("auth:\n  htpasswd:\n    realm: nidus-test\n    path: {}\n", p.display()))
            .unwrap_or_default();
        Self::start_with(env, name, port, None, "", &auth)
    }

    /// Serves what `other` stores over TLS with `certs` (`server.pem`,
    /// `server.key`, and `ca.pem`, whose client certificates it requires).
    pub fn start_tls(env: &TestEnv, name: &str, port: u16, other: &Registry, certs: &Path) -> Self {
        let tls = format!(
            "  tls:\n    certificate: {}\n    key: {}\n    clientcas:\n      - {}\n",
            certs.join("server.pem").display(),
            certs.join("server.key").display(),
            certs.join("ca.pem").display()
        );
        Self::start_with(env, name, port, Some(&other.dir.join("data")), &tls, "")
    }

    fn start_with(env: &TestEnv, name: &str, port: u16, storage: Option<&Path>, http: &str, auth: &str) -> Self {
        let dir = env.base.join(format!("registry-{name}"));
        fs::create_dir_all(dir.join("data")).expect("registry dir");
        let storage = storage.map(Path::to_path_buf).unwrap_or_else(|| dir.join("data"));
        let config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{http}{auth}",
            storage.display()
        );
        let config_path = dir.join("config.yml");
        fs::write(&config_path, config).expect("registry config");
        let log = dir.join("registry.log");
        let out = fs::File::create(&log).expect("registry log");
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", env.netns))
            .args(["--", "docker-registry", "serve"])
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log fd"))
            .stderr(out)
            .spawn()
            .expect("starting docker-registry (is it installed?)");
        let registry = Self { child: Some(child), port, dir, log, netns: env.netns.clone() };
        wait_listening(&registry.netns, port);
        registry
    }

    /// `127.0.0.1:<port>`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Pushes the OCI layout `layout` as `repo:tag` (`--all`: an index with
    /// every image it lists); `format` converts (`v2s2`: Docker schema 2).
    pub fn push(&self, layout: &Path, target: &str, format: Option<&str>, credentials: Option<&str>) {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.netns)).args(["--", "skopeo", "copy", "--all"]);
        cmd.args(["--dest-tls-verify=false", "--retry-times", "2"]);
        match format {
            Some(format) => {
                cmd.args(["--format", format]);
            }
            None => {
                cmd.arg("--preserve-digests");
            }
        }
        if let Some(credentials) = credentials {
            cmd.args(["--dest-creds", credentials]);
        }
        cmd.arg(format!("oci:{}", layout.display())).arg(format!("docker://{}/{target}", self.host()));
        let out = cmd.output().expect("running skopeo (is it installed?)");
        assert!(
            out.status.success(),
            "skopeo copy to {target} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// GET requests the registry answered for the blob `digest`.
    pub fn blob_gets(&self, digest: &str) -> usize {
        self.blob_get_lines(digest).len()
    }

    /// Of those, the ones answered `206 Partial Content` (a range request).
    pub fn partial_blob_gets(&self, digest: &str) -> usize {
        self.blob_get_lines(digest).iter().filter(|l| l.contains("\" 206 ")).count()
    }

    /// The access log's lines of GET requests for the blob `digest`.
    fn blob_get_lines(&self, digest: &str) -> Vec<String> {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let needle = format!("/blobs/{digest}");
        log.lines().filter(|l| l.contains("\"GET ") && l.contains(&needle)).map(str::to_string).collect()
    }

    /// GET requests the registry answered for manifests.
    pub fn manifest_gets(&self) -> usize {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        log.lines().filter(|l| l.contains("\"GET ") && l.contains("/manifests/")).count()
    }
}

/// Makes, in `dir`, a CA (`ca.pem`), a server certificate for 127.0.0.1
/// (`server.pem`, `server.key`) and a client certificate (`client.pem`,
/// `client.key`), both signed by the CA, with `openssl`.
pub fn make_certificates(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("running openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let ca: Vec<&str> =
        ["req", "-x509"].into_iter().chain(key).chain(["-keyout", "ca.key", "-out", "ca.pem"]).collect();
    openssl(&[&ca[..], &["-days", "2", "-subj", "/CN=nidus-test-ca"]].concat());
    for (name, usage, san) in [("server", "serverAuth", "subjectAltName=IP:127.0.0.1\n"), ("client", "clientAuth", "")]
    {
        fs::write(dir.join(format!("{name}.ext")), format!("{san}extendedKeyUsage={usage}\n")).unwrap();
        let (k, csr, pem, ext) =
            (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"), format!("{name}.ext"));
        let req: Vec<&str> = ["req"].into_iter().chain(key).chain(["-keyout", &k, "-out", &csr]).collect();
        openssl(&[&req[..], &["-subj", &format!("/CN=nidus-test-{name}")]].concat());
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGKILL);
            let _ = child.wait();
        }
    }
}
