//! The deploy examples (`examples/deploy/`) as a user takes them: the systemd unit's command
//! run against a real server and stopped as `KillMode=mixed` stops it (SIGTERM to pelican
//! alone), the Kubernetes and KEDA manifests read as YAML and checked for what makes them
//! work (the probes on `/healthz`, the pod's name as the consumer, the trigger on the
//! Deployment's stream and group), and the pod's arguments run as the container runs them.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::process::Command;

use pelican_tests::server::{Flavor, Server};
use support::{wait_until, Json, Pelican, Scratch};
use yaml_rust2::{Yaml, YamlLoader};

fn example(name: &str) -> String {
    let path = format!("{}/../examples/deploy/{name}", env!("CARGO_MANIFEST_DIR"));
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The example Python handler, where the examples name the one installed.
fn handler() -> String {
    format!("{}/../examples/pipe/handler.py", env!("CARGO_MANIFEST_DIR"))
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

/// The unit stops pelican alone (`KillMode=mixed`): its `ExecStart`, run against Redis 7.0
/// with the example handler slowed down, gets SIGTERM to its main process only while entries
/// are in the handler's hands; they finish, their acks are confirmed, the handler sees its
/// stdin close and exits, and pelican exits 0 — nothing failed, nothing killed.
#[test]
fn the_systemd_unit_stops_gracefully() {
    let unit = service(&example("pelican-worker.service"));
    assert_eq!(unit.get("KillMode").map(String::as_str), Some("mixed"), "{unit:?}");
    assert_eq!(unit.get("KillSignal").map(String::as_str), Some("SIGTERM"));
    assert_eq!(unit.get("Restart").map(String::as_str), Some("on-failure"));
    let exec = unit.get("ExecStart").expect("ExecStart").clone();
    assert!(exec.starts_with("/usr/local/bin/pelican consume "), "{exec}");
    assert!(exec.contains("/opt/worker/handler.py"), "{exec}");

    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let dir = Scratch::new("deploy-unit");
    let stats = dir.file("stats.json");
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    // As installed, but with this build, the example handler and a free port.
    let command = exec
        .replace("/usr/local/bin/pelican consume ", "")
        .replace("/opt/worker/handler.py", &handler())
        .replace("127.0.0.1:9464", &metrics);
    let args: Vec<String> = shell_words(&command);
    let mut args: Vec<&str> = std::iter::once("consume").chain(args.iter().map(String::as_str)).collect();
    args.extend(["--stats-json", &stats]);
    let url = format!("redis://{}", server.addr());
    let mut p = Pelican::spawn_env(
        &args,
        &[("PELICAN_URL", &url), ("PELICAN_CONSUMER", "host-1"), ("HANDLER_SLOW_MS", "200")],
    );
    // `--create-group` makes the group at `$`: new entries only.
    wait_until("the group", || admin.group_exists("orders", "billing"));
    admin.xadd_n("orders", 300, 8);
    wait_until("entries in the handler's hands", || {
        admin.group_exists("orders", "billing") && admin.xpending_count("orders", "billing") >= 32
    });
    p.term(); // KillMode=mixed: the main process only
    let status = p.wait();
    let err = p.stderr();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(!err.contains("killed by signal") && !err.contains("exited with status"), "{err}");
    let stats = Json::parse(&fs::read_to_string(&stats).unwrap());
    let (handled, acked) = (stats.get("handled").num(), stats.get("acked").num());
    assert!(handled >= 32.0, "{err}");
    assert_eq!((acked, stats.get("retried").num()), (handled, 0.0), "every entry in hand finished: {err}");
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

fn yaml(name: &str) -> Yaml {
    let mut docs = YamlLoader::load_from_str(&example(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(docs.len(), 1, "{name}: one document");
    docs.remove(0)
}

/// The Deployment: the pod's name is the consumer, the probes ask `/healthz` on the metrics
/// port the arguments serve, a grace period for the graceful stop; its arguments run as the
/// container would run them, and consume.
#[test]
fn the_kubernetes_deployment_probes_health_and_its_arguments_consume() {
    let d = yaml("kubernetes.yaml");
    assert_eq!(d["kind"].as_str(), Some("Deployment"));
    let pod = &d["spec"]["template"]["spec"];
    assert!(pod["terminationGracePeriodSeconds"].as_i64().is_some_and(|s| s >= 30), "{pod:?}");
    let container = &pod["containers"][0];
    let env = container["env"].as_vec().expect("env");
    let consumer =
        env.iter().find(|e| e["name"].as_str() == Some("PELICAN_CONSUMER")).expect("PELICAN_CONSUMER");
    assert_eq!(consumer["valueFrom"]["fieldRef"]["fieldPath"].as_str(), Some("metadata.name"));
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &container[probe]["httpGet"];
        assert_eq!(
            (get["path"].as_str(), get["port"].as_str()),
            (Some("/healthz"), Some("metrics")),
            "{probe}"
        );
    }
    assert_eq!(container["ports"][0]["containerPort"].as_i64(), Some(9464));
    let args: Vec<String> =
        container["args"].as_vec().expect("args").iter().map(|a| a.as_str().unwrap().to_string()).collect();
    assert!(args.contains(&"--metrics=0.0.0.0:9464".to_string()), "{args:?}");

    // The container's arguments, with this build's example handler and a loopback port.
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("/app/handler.py", &handler()).replace("0.0.0.0:9464", &metrics))
        .collect();
    let mut all: Vec<&str> = vec!["consume"];
    all.extend(args.iter().map(String::as_str));
    let url = format!("redis://{}", server.addr());
    let mut p =
        Pelican::spawn_env(&all, &[("PELICAN_URL", &url), ("PELICAN_CONSUMER", "orders-worker-7d9f-abcde")]);
    // `--create-group` makes the group at `$`: new entries only.
    wait_until("the group", || admin.group_exists("orders", "billing"));
    let last = admin.xadd_n("orders", 50, 8).pop().unwrap();
    wait_until("all 50 acked", || {
        format!("{:?}", admin.call(&["XINFO", "GROUPS", "orders"])).contains(&last)
            && admin.xpending_count("orders", "billing") == 0
    });
    p.stop();
    assert!(p.stderr().contains("left the group"), "{}", p.stderr());
    // The pod stopped holding nothing: its name is not left in the group.
    assert_eq!(admin.consumer_names("orders", "billing"), Vec::<String>::new(), "{}", p.stderr());

    // The image's default arguments are the pod's.
    let image = example("Containerfile");
    let cmd = image.replace("\\\n", " ");
    let cmd = cmd.lines().find_map(|l| l.strip_prefix("CMD ")).expect("CMD");
    let cmd: Vec<String> = serde_json::from_str(cmd.trim()).expect("CMD is a JSON array");
    let flags = |words: &[String]| -> Vec<String> {
        words.iter().flat_map(|w| w.splitn(2, '=').map(str::to_string).collect::<Vec<_>>()).collect()
    };
    let pod: Vec<String> =
        container["args"].as_vec().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
    assert_eq!(flags(&cmd), flags(&pod), "the Containerfile's CMD and the pod's args");
    assert!(image.contains("ENTRYPOINT [\"/usr/bin/tini\", \"--\", \"/usr/local/bin/pelican\", \"consume\"]"));
}

/// The KEDA ScaledObject scales the Deployment on its own stream and group's lag.
#[test]
fn the_keda_scaled_object_scales_the_deployment_on_its_lag() {
    let scaled = yaml("keda.yaml");
    let deployment = yaml("kubernetes.yaml");
    assert_eq!(scaled["kind"].as_str(), Some("ScaledObject"));
    assert_eq!(scaled["spec"]["scaleTargetRef"]["name"], deployment["metadata"]["name"]);
    let trigger = &scaled["spec"]["triggers"][0];
    assert_eq!(trigger["type"].as_str(), Some("redis-streams"));
    let meta = &trigger["metadata"];
    let args: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert!(args.contains(&format!("--stream={}", meta["stream"].as_str().unwrap()).as_str()), "{args:?}");
    assert!(
        args.contains(&format!("--group={}", meta["consumerGroup"].as_str().unwrap()).as_str()),
        "{args:?}"
    );
    assert!(meta["lagCount"].as_str().is_some_and(|n| n.parse::<u64>().is_ok()), "{meta:?}");
    assert_eq!(scaled["spec"]["minReplicaCount"].as_i64(), Some(0), "lagCount scales from zero");
}
