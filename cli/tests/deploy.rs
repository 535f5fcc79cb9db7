//! The deploy examples (`examples/deploy/`) as a user takes them: the systemd unit's command
//! run against a real server and stopped as `KillMode=mixed` stops it (SIGTERM to pelican
//! alone); each Kubernetes example's worker started as Kubernetes would start its container —
//! its arguments, its environment resolved from the example's Secret (the values a real
//! server needs put in its keys: address, password, CA) with Kubernetes' `$(NAME)` expansion,
//! the Secret's files mounted — against a single server over TLS, a Sentinel topology over
//! TLS and a Cluster, and probed on the paths its probes ask. What the tools that read the
//! files check (Kubernetes' schemas, KEDA's fields, hadolint, systemd-analyze) is
//! `scripts/check-deploy`'s.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use pelican_tests::admin::Admin;
use pelican_tests::cluster::Cluster;
use pelican_tests::sentinel::{Topology, TopologyOptions, SERVICE};
use pelican_tests::server::{Flavor, Options, Server, Tls};
use support::{wait_until, Json, Pelican, Scratch};
use yaml_rust2::{Yaml, YamlLoader};

/// The data nodes' password in these tests: of the characters the examples allow in it.
const PASSWORD: &str = "0f1e2d3c4b5a-._~";

fn example(name: &str) -> String {
    let path = format!("{}/../examples/deploy/{name}", env!("CARGO_MANIFEST_DIR"));
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The example Python handler, where the examples name the one installed.
fn handler() -> String {
    format!("{}/../examples/pipe/handler.py", env!("CARGO_MANIFEST_DIR"))
}

fn free_addr() -> String {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
}

/// A systemd unit's `[Service]` settings, continuation lines joined (the last of a repeated
/// key wins, as systemd has it for these).
fn service(unit: &str) -> BTreeMap<String, String> {
    let joined = unit.replace("\\\n", " ");
    let mut section = "";
    let mut settings = BTreeMap::new();
    for line in joined.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if line.starts_with('[') {
            section = line;
        } else if let (Some((key, value)), "[Service]") = (line.split_once('='), section) {
            settings.insert(key.to_string(), value.to_string());
        }
    }
    settings
}

/// The value of `--flag=V` or `--flag V` in `args`.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let eq = format!("{name}=");
    args.iter().enumerate().find_map(|(i, a)| match a.strip_prefix(&eq) {
        Some(v) => Some(v),
        None if a == name => args.get(i + 1).map(String::as_str),
        None => None,
    })
}

/// The unit: its `ExecStart`, run against Redis 7.0 with the example handler slowed down,
/// reads the stream's existing backlog (the first start's position, `--create-group 0`)
/// and, stopped as `KillMode=mixed` stops it (SIGTERM to its main process only) while
/// entries are in the handler's hands, lets them finish: their acks confirmed, the handler's
/// stdin closed, exit 0. A usage error exits 2, which the unit does not restart; its stop
/// timeout leaves room for pelican's own.
#[test]
fn the_systemd_unit_stops_gracefully_and_does_not_restart_a_usage_error() {
    let unit = service(&example("pelican-worker.service"));
    for (key, want) in [
        ("KillMode", "mixed"),
        ("KillSignal", "SIGTERM"),
        ("Restart", "on-failure"),
        ("RestartPreventExitStatus", "2"),
    ] {
        assert_eq!(unit.get(key).map(String::as_str), Some(want), "{key}: {unit:?}");
    }
    let exec = unit.get("ExecStart").expect("ExecStart").clone();
    assert!(exec.starts_with("/usr/local/bin/pelican consume "), "{exec}");
    assert!(exec.contains("/opt/worker/handler.py"), "{exec}");
    let words: Vec<String> = shell_words(&exec.replace("/usr/local/bin/pelican consume ", ""));
    assert_eq!(flag(&words, "--log-time"), Some("none"), "journald stamps the lines itself");
    let stop_ms: u64 = flag(&words, "--stop-timeout-ms").expect("--stop-timeout-ms").parse().unwrap();
    let stop_sec: u64 = unit.get("TimeoutStopSec").expect("TimeoutStopSec").parse().unwrap();
    // pelican's stop: the timeout, then the handler's SIGTERM and SIGKILL 3 s apart, then 2 s.
    assert!(
        stop_sec * 1000 > stop_ms + 5000,
        "TimeoutStopSec {stop_sec} s within --stop-timeout-ms {stop_ms}"
    );

    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    // There before the first start: --create-group 0 reads it.
    admin.xadd_n("orders", 300, 8);
    let dir = Scratch::new("deploy-unit");
    let stats = dir.file("stats.json");
    let metrics = free_addr();
    // As installed, but with this build, the example handler and a free port.
    let command = exec
        .replace("/usr/local/bin/pelican consume ", "")
        .replace("/opt/worker/handler.py", &handler())
        .replace("127.0.0.1:9464", &metrics);
    let args: Vec<String> = shell_words(&command);
    let mut args: Vec<&str> = std::iter::once("consume").chain(args.iter().map(String::as_str)).collect();
    args.extend(["--stats-json", &stats]);
    // What the EnvironmentFile and Environment= lines give it.
    let url = format!("redis://{}", server.addr());
    let env = [("PELICAN_URL", url.as_str()), ("PELICAN_CONSUMER", "host-1"), ("HANDLER_SLOW_MS", "200")];
    let mut p = Pelican::spawn_env(&args, &env);
    wait_until("entries in the handler's hands", || {
        admin.group_exists("orders", "billing") && admin.xpending_count("orders", "billing") >= 32
    });
    p.term(); // KillMode=mixed: the main process only
    let status = p.wait();
    let err = p.stderr();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(!err.contains("killed by signal") && !err.contains("exited with status"), "{err}");
    assert!(p.raw_stderr().starts_with("pelican: "), "--log-time none: {}", p.raw_stderr());
    let stats = Json::parse(&fs::read_to_string(&stats).unwrap());
    let (handled, acked) = (stats.get("handled").num(), stats.get("acked").num());
    assert!(handled >= 32.0, "{err}");
    assert_eq!((acked, stats.get("retried").num()), (handled, 0.0), "every entry in hand finished: {err}");

    // A usage error: exit 2, before connecting (RestartPreventExitStatus).
    args.extend(["--concurrency", "0"]);
    let mut p = Pelican::spawn_env(&args, &env);
    assert_eq!(p.wait().code(), Some(2), "{}", p.stderr());
}

/// Words of a command line as `sh` splits them (single and double quotes; no expansions in
/// the examples), by asking `sh` itself.
fn shell_words(line: &str) -> Vec<String> {
    let out = Command::new("sh")
        .args(["-c", &format!("for w in {line}; do printf '%s\\0' \"$w\"; done")])
        .output()
        .expect("run sh");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect()
}

/// The objects of a Kubernetes example, each of a kind of its own.
struct Objects(Vec<Yaml>);

impl Objects {
    fn load(name: &str) -> Objects {
        Objects(YamlLoader::load_from_str(&example(name)).unwrap_or_else(|e| panic!("{name}: {e}")))
    }

    fn kind(&self, kind: &str) -> &Yaml {
        let mut found = self.0.iter().filter(|d| d["kind"].as_str() == Some(kind));
        let one = found.next().unwrap_or_else(|| panic!("no {kind}"));
        assert!(found.next().is_none(), "one {kind}");
        one
    }

    /// The worker's container.
    fn container(&self) -> &Yaml {
        &self.kind("Deployment")["spec"]["template"]["spec"]["containers"][0]
    }

    fn args(&self) -> Vec<String> {
        let args = self.container()["args"].as_vec().expect("args");
        args.iter().map(|a| a.as_str().expect("an argument is a string").to_string()).collect()
    }
}

fn text(y: &Yaml) -> &str {
    y.as_str().unwrap_or_else(|| panic!("a string: {y:?}"))
}

/// `value` with each `$(NAME)` of a variable defined before it replaced, `$$` a `$`, as
/// Kubernetes expands a container's `env` values.
fn expand(value: &str, defined: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some((name, after)) = rest.strip_prefix("$(").and_then(|r| r.split_once(')')) {
            match defined.iter().rev().find(|(n, _)| n == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&rest[..name.len() + 3]),
            }
            rest = after;
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out + rest
}

/// The worker of a Kubernetes example as Kubernetes starts it, named `pod`, with `secret`
/// standing for the example Secret's values (each must be a key the Secret has): its
/// arguments, with the Secret's files mounted in a scratch directory, the example handler
/// and a loopback port for `--metrics`; its environment, resolved and expanded.
struct Pod {
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// The port the probes ask.
    metrics: String,
    _files: Scratch,
}

impl Pod {
    fn start_of(objects: &Objects, secret: &[(&str, String)], pod: &str) -> Pod {
        let mut values = BTreeMap::new();
        for (key, value) in objects.kind("Secret")["stringData"].as_hash().expect("stringData") {
            values.insert(text(key).to_string(), text(value).to_string());
        }
        for (key, value) in secret {
            assert!(values.contains_key(*key), "the Secret has no key {key}");
            values.insert(key.to_string(), value.clone());
        }
        let secret_name = text(&objects.kind("Secret")["metadata"]["name"]);
        let container = objects.container();
        let mut env: Vec<(String, String)> = Vec::new();
        for var in container["env"].as_vec().expect("env") {
            let name = text(&var["name"]).to_string();
            let from = &var["valueFrom"];
            let value = if let Some(value) = var["value"].as_str() {
                expand(value, &env)
            } else if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
                assert_eq!(field, "metadata.name");
                pod.to_string()
            } else {
                let key = &from["secretKeyRef"];
                assert_eq!(text(&key["name"]), secret_name);
                values.get(text(&key["key"])).unwrap_or_else(|| panic!("{name}: no such key")).clone()
            };
            env.push((name, value));
        }
        let files = Scratch::new("deploy-pod");
        let mut args = objects.args();
        let volumes = objects.kind("Deployment")["spec"]["template"]["spec"]["volumes"].as_vec().cloned();
        for mount in container["volumeMounts"].as_vec().cloned().unwrap_or_default() {
            let volume = volumes.iter().flatten().find(|v| v["name"] == mount["name"]).expect("the volume");
            assert_eq!(text(&volume["secret"]["secretName"]), secret_name);
            let dir = files.path().join(text(&mount["name"]));
            fs::create_dir_all(&dir).unwrap();
            for item in volume["secret"]["items"].as_vec().expect("items") {
                fs::write(dir.join(text(&item["path"])), &values[text(&item["key"])]).unwrap();
            }
            let path = text(&mount["mountPath"]);
            args = args.iter().map(|a| a.replace(path, dir.to_str().unwrap())).collect();
        }
        let port = container["ports"][0]["containerPort"].as_i64().expect("the metrics port");
        let metrics = free_addr();
        let args = args
            .iter()
            .map(|a| a.replace("/app/handler.py", &handler()).replace(&format!("0.0.0.0:{port}"), &metrics))
            .collect();
        Pod { args, env, metrics, _files: files }
    }

    fn spawn(&self) -> Pelican {
        let mut args = vec!["consume"];
        args.extend(self.args.iter().map(String::as_str));
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Pelican::spawn_env(&args, &env)
    }
}

/// `GET path` on `addr`: the status and the body.
fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut conn = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(2)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).ok()?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).ok()?;
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    Some((status, answer.split_once("\r\n\r\n")?.1.to_string()))
}

/// The pod of `objects` against the server `admin` reaches: it reads the 40 entries there
/// before it started and 40 added after, acks them all, answers its probes (each on the path
/// and port its probe asks) 200, and, stopped, leaves the group holding nothing.
fn consumes(objects: &Objects, pod: &Pod, admin: &mut Admin) {
    let stream = flag(&pod.args, "--stream").expect("--stream").to_string();
    let group = flag(&pod.args, "--group").expect("--group").to_string();
    let container = objects.container();
    assert_eq!(flag(&pod.args, "--create-group"), Some("0"), "the group starts where KEDA counts from");
    admin.xadd_n(&stream, 40, 8);
    let mut p = pod.spawn();
    wait_until("the group", || admin.group_exists(&stream, &group));
    let last = admin.xadd_n(&stream, 40, 8).pop().unwrap();
    wait_until("all 80 acked", || {
        let groups = format!("{:?}", admin.call(&["XINFO", "GROUPS", &stream]));
        groups.contains(&last) && admin.xpending_count(&stream, &group) == 0
    });
    for probe in ["livenessProbe", "readinessProbe"] {
        let get_ = &container[probe]["httpGet"];
        assert_eq!(text(&get_["port"]), text(&container["ports"][0]["name"]), "{probe}");
        let path = text(&get_["path"]);
        assert_eq!(get(&pod.metrics, path), Some((200, "ok\n".into())), "{probe} {path}: {}", p.stderr());
    }
    p.stop();
    assert!(p.stderr().contains("left the group"), "{}", p.stderr());
    assert_eq!(admin.consumer_names(&stream, &group), Vec::<String>::new(), "{}", p.stderr());
}

/// The single-server example over TLS (Redis 7.0): the Secret's address, password and CA
/// make the pod's URL and its `--tls-ca` file, and it consumes. Then the reason for its second
/// trigger: a pod killed with entries in hand leaves them pending with no lag (what KEDA's
/// lagCount reads: nothing to wake for), and a pod woken for them (the pendingEntriesCount
/// trigger: XPENDING) reclaims them.
#[test]
fn the_kubernetes_example_consumes_from_a_tls_server_with_its_secret() {
    let objects = Objects::load("kubernetes.yaml");
    let server = Server::start_with(
        Flavor::Redis70,
        Options::default().with_tls(Tls::default()).with_requirepass(PASSWORD),
    );
    let ca = fs::read_to_string(server.pki().expect("a PKI").ca()).unwrap();
    let secret = [
        ("address", server.tls_addr().expect("a TLS port").to_string()),
        ("password", PASSWORD.to_string()),
        ("ca.crt", ca),
    ];
    let pod = Pod::start_of(&objects, &secret, "orders-worker-7d9f-abcde");
    assert!(pod.env.iter().any(|(k, v)| k == "PELICAN_URL" && v.starts_with("rediss://:")), "{:?}", pod.env);
    let mut admin = server.admin();
    consumes(&objects, &pod, &mut admin);

    // Killed with entries in hand: pending, and no lag.
    let mut slow = Pod::start_of(&objects, &secret, "orders-worker-7d9f-killed");
    slow.env.push(("HANDLER_SLOW_MS".into(), "5000".into()));
    let mut p = slow.spawn();
    admin.xadd_n("orders", 10, 8);
    wait_until("entries in hand", || admin.xpending_count("orders", "billing") == 10);
    p.kill9();
    let lag = |admin: &mut Admin| {
        let groups = admin.call(&["XINFO", "GROUPS", "orders"]);
        let fields = groups.as_array().unwrap()[0].as_array().unwrap().to_vec();
        let at = fields.iter().position(|f| f.as_text().as_deref() == Some("lag")).unwrap();
        fields[at + 1].as_int()
    };
    assert_eq!(lag(&mut admin), Some(0), "nothing for lagCount to wake a pod for");
    assert_eq!(admin.xpending_count("orders", "billing"), 10, "what pendingEntriesCount counts");
    // A pod woken for them takes them (here after 1 s idle, not the default 30 s, to keep the
    // test short) and acks them.
    let mut woken = Pod::start_of(&objects, &secret, "orders-worker-7d9f-woken");
    woken.args.push("--min-idle-ms=1000".into());
    let mut p = woken.spawn();
    wait_until("the dead pod's entries reclaimed and acked", || {
        admin.xpending_count("orders", "billing") == 0
    });
    p.stop();
}

/// The Sentinel example over TLS (Redis 7.0, three sentinels with a password of their own):
/// the pod's `rediss+sentinel://` URL from the Secret's sentinels, service and password, the
/// sentinels' password from the environment, the CA mounted.
#[test]
fn the_sentinel_example_consumes_through_tls_sentinels_with_its_secret() {
    let objects = Objects::load("kubernetes-sentinel.yaml");
    let options = TopologyOptions {
        data: Options::default().with_tls(Tls::default()).with_requirepass(PASSWORD),
        sentinel_pass: Some("s3ntinel-own".into()),
        ..TopologyOptions::default()
    };
    let topology = Topology::start_with(Flavor::Redis70, options);
    let sentinels: Vec<String> = topology.sentinel_tls_addrs().iter().map(SocketAddr::to_string).collect();
    let ca = fs::read_to_string(topology.pki().expect("a PKI").ca()).unwrap();
    let secret = [
        ("sentinels", sentinels.join(",")),
        ("service", SERVICE.to_string()),
        ("password", PASSWORD.to_string()),
        ("sentinel-password", "s3ntinel-own".to_string()),
        ("ca.crt", ca),
    ];
    let pod = Pod::start_of(&objects, &secret, "orders-worker-5c8b-fghij");
    assert!(pod.env.iter().any(|(k, v)| k == "PELICAN_URL" && v.starts_with("rediss+sentinel://:")));
    let mut admin = topology.admin(topology.master());
    consumes(&objects, &pod, &mut admin);
}

/// The Cluster example (Valkey 8.1, three masters with replicas, a password on every node):
/// the pod's URL names one node, a replica even; the stream and its dead letters share a slot.
#[test]
fn the_cluster_example_consumes_from_any_node_with_its_secret() {
    let objects = Objects::load("kubernetes-cluster.yaml");
    let cluster = Cluster::start(Flavor::Valkey81);
    let args = objects.args();
    let stream = flag(&args, "--stream").unwrap();
    let dead = flag(&args, "--dead-letter").unwrap();
    assert_eq!(cluster.slot_of(stream), cluster.slot_of(dead), "one slot for a dead-letter move");
    let master = cluster.owner_of(stream);
    // The password, set once the cluster formed (the harness forms it without one): the
    // replicas' first, so that their links to their masters hold.
    for node in cluster.addrs() {
        Admin::connect(node).call(&["CONFIG", "SET", "masterauth", PASSWORD]);
    }
    for node in cluster.addrs() {
        Admin::connect(node).call(&["CONFIG", "SET", "requirepass", PASSWORD]);
    }
    // Another node than the stream's master: it follows MOVED there.
    let other = cluster.addrs().into_iter().find(|&a| a != master).unwrap();
    let secret = [("address", other.to_string()), ("password", PASSWORD.to_string())];
    let pod = Pod::start_of(&objects, &secret, "orders-worker-6f7a-klmno");
    let mut admin = Admin::connect_auth(master, "default", PASSWORD).expect("the master, with the password");
    consumes(&objects, &pod, &mut admin);
}

/// The image's default arguments are the single-server pod's, but for the CA file the pod
/// mounts; its entrypoint runs pelican under an init.
#[test]
fn the_image_runs_the_pods_arguments() {
    let image = example("Containerfile");
    let cmd = image.replace("\\\n", " ");
    let cmd = cmd.lines().find_map(|l| l.strip_prefix("CMD ")).expect("CMD");
    let cmd: Vec<String> = serde_json::from_str(cmd.trim()).expect("CMD is a JSON array");
    let flags = |words: &[String]| -> Vec<String> {
        words.iter().flat_map(|w| w.splitn(2, '=').map(str::to_string).collect::<Vec<_>>()).collect()
    };
    let pod: Vec<String> =
        Objects::load("kubernetes.yaml").args().into_iter().filter(|a| !a.starts_with("--tls-ca=")).collect();
    assert_eq!(flags(&cmd), flags(&pod), "the Containerfile's CMD and the pod's args");
    assert!(image.contains("ENTRYPOINT [\"/usr/bin/tini\", \"--\", \"/usr/local/bin/pelican\", \"consume\"]"));
    assert!(
        image.contains("--profile dist") && image.contains("/src/target/dist/pelican"),
        "the shipping build"
    );
}

/// Kubernetes' `$(NAME)` expansion, as the pods above are given it.
#[test]
fn env_values_expand_as_kubernetes_expands_them() {
    let defined = vec![("A".to_string(), "x".to_string()), ("B".to_string(), "y:1".to_string())];
    assert_eq!(expand("redis://:$(A)@$(B)", &defined), "redis://:x@y:1");
    assert_eq!(expand("$(C) $$(A) $", &defined), "$(C) $(A) $");
}
