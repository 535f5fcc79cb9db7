"""The KEDA objects of the Kubernetes examples (scripts/check-deploy runs this in its venv).

Each file given holds a Secret, a Deployment, a TriggerAuthentication and a ScaledObject.
Checked:
- the ScaledObject and TriggerAuthentication as KEDA's own CRDs have them (the models of
  cloudcoil-models-keda, generated from KEDA's CRDs): each parses, and reads back to the very
  object written (a field the CRD does not have would be dropped, and is an error);
- each trigger's metadata against the fields KEDA documents for its type, and each
  TriggerAuthentication parameter against the ones the Redis scalers document (keda.sh,
  docs 2.21: scalers/redis-streams, redis-sentinel-streams, redis-cluster-streams);
- the wiring: the scale target is the file's Deployment, which sets no `replicas`; every
  `…FromEnv` names a variable its container defines (KEDA reads them there); every
  authenticationRef and secretTargetRef names an object and key of the file; the stream and
  group are the Deployment's --stream and --group; TLS is not switched on twice (the docs:
  `enableTLS` cannot go with the TriggerAuthentication's `tls`); a `lagCount` has its
  `activationLagCount` (the docs: required with it).
"""

import sys

import yaml
from cloudcoil.models.keda import v1alpha1 as keda

# The metadata each trigger type documents (keda.sh docs 2.21, "Trigger Specification" and
# "Parameter list").
COMMON = {"usernameFromEnv", "passwordFromEnv", "stream", "consumerGroup", "pendingEntriesCount",
          "streamLength", "lagCount", "activationLagCount", "enableTLS", "unsafeSsl", "databaseIndex"}
DOCUMENTED = {
    "redis-streams": COMMON | {"address", "host", "port", "addressFromEnv", "hostFromEnv", "portFromEnv"},
    "redis-sentinel-streams": COMMON | {"addresses", "hosts", "ports", "addressesFromEnv", "hostsFromEnv",
                                        "portsFromEnv", "sentinelUsernameFromEnv", "sentinelPasswordFromEnv",
                                        "sentinelMaster", "sentinelMasterFromEnv"},
    "redis-cluster-streams": COMMON | {"addresses", "hosts", "ports", "addressesFromEnv", "hostsFromEnv",
                                       "portsFromEnv"},
}
# The TriggerAuthentication parameters the Redis scalers document ("Authentication
# Parameters": TLS and authentication).
AUTH_PARAMETERS = {"tls", "ca", "cert", "key", "keyPassword", "username", "password"}

failures = []


def differences(written, read, path=""):
    """Where `read` (the object as the CRD's model reads it back) differs from `written`."""
    if isinstance(written, dict) and isinstance(read, dict):
        return [d for k in sorted(set(written) | set(read))
                for d in (differences(written.get(k), read.get(k), f"{path}.{k}") if k in read and k in written
                          else [f"{path}.{k}" + (" (not a field)" if k in written else " (added)")])]
    if isinstance(written, list) and isinstance(read, list) and len(written) == len(read):
        return [d for i, (w, r) in enumerate(zip(written, read)) for d in differences(w, r, f"{path}[{i}]")]
    return [] if written == read else [f"{path}: {written!r} read as {read!r}"]


def fail(where, what):
    failures.append(f"{where}: {what}")


def check(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    for kind in ("Secret", "Deployment", "TriggerAuthentication", "ScaledObject"):
        if len(by_kind.get(kind, [])) != 1:
            fail(path, f"one {kind} expected, found {len(by_kind.get(kind, []))}")
            return
    secret, deployment = by_kind["Secret"][0], by_kind["Deployment"][0]
    auth, scaled = by_kind["TriggerAuthentication"][0], by_kind["ScaledObject"][0]

    # As KEDA's CRDs have them: parsed, and read back whole.
    for obj, model in ((auth, keda.TriggerAuthentication), (scaled, keda.ScaledObject)):
        where = f"{path}: {obj['kind']} {obj['metadata']['name']}"
        try:
            back = model.model_validate(obj).model_dump(mode="json", by_alias=True, exclude_unset=True)
        except Exception as e:  # pydantic's ValidationError, with every field it refused
            fail(where, f"not as KEDA's CRD has it: {e}")
            continue
        if back != obj:
            fail(where, f"KEDA's CRD does not read these as written: {', '.join(differences(obj, back))}")

    keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
    secrets = {secret["metadata"]["name"]: keys}
    spec = deployment["spec"]
    if "replicas" in spec:
        fail(path, "the Deployment sets replicas, which the ScaledObject owns")
    container = spec["template"]["spec"]["containers"][0]
    env = {e["name"] for e in container.get("env", [])}
    for e in container.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref and ref["key"] not in secrets.get(ref["name"], set()):
            fail(path, f"env {e['name']} reads {ref['name']}/{ref['key']}, which the Secret lacks")
    for v in spec["template"]["spec"].get("volumes", []):
        for item in v.get("secret", {}).get("items", []):
            if item["key"] not in secrets.get(v["secret"]["secretName"], set()):
                fail(path, f"volume {v['name']} mounts {item['key']}, which the Secret lacks")
    args = dict(a.split("=", 1) for a in container["args"] if "=" in a)

    params = set()
    for ref in auth["spec"].get("secretTargetRef", []):
        params.add(ref["parameter"])
        if ref["parameter"] not in AUTH_PARAMETERS:
            fail(path, f"TriggerAuthentication parameter {ref['parameter']} is not one KEDA documents")
        if ref["key"] not in secrets.get(ref["name"], set()):
            fail(path, f"TriggerAuthentication reads {ref['name']}/{ref['key']}, which the Secret lacks")

    if scaled["spec"]["scaleTargetRef"]["name"] != deployment["metadata"]["name"]:
        fail(path, "the ScaledObject scales another target than the Deployment")
    for i, trigger in enumerate(scaled["spec"]["triggers"]):
        where = f"{path}: trigger {i} ({trigger['type']})"
        documented = DOCUMENTED.get(trigger["type"])
        if documented is None:
            fail(where, "not a Redis Streams trigger")
            continue
        meta = trigger["metadata"]
        for key, value in meta.items():
            if key not in documented:
                fail(where, f"{key} is not a field KEDA documents for {trigger['type']}")
            if key.endswith("FromEnv") and value not in env:
                fail(where, f"{key}: {value} is not in the Deployment's environment, where KEDA reads it")
            if not isinstance(value, str):
                fail(where, f"{key}: KEDA's metadata values are strings, not {value!r}")
        ref = trigger.get("authenticationRef", {}).get("name")
        if ref is not None and ref != auth["metadata"]["name"]:
            fail(where, f"authenticationRef {ref} is not the file's TriggerAuthentication")
        if "enableTLS" in meta and ref is not None and "tls" in params:
            fail(where, "TLS switched on twice (enableTLS and the TriggerAuthentication's tls)")
        if "lagCount" in meta and "activationLagCount" not in meta:
            fail(where, "lagCount without activationLagCount")
        if meta.get("stream") != args.get("--stream") or meta.get("consumerGroup") != args.get("--group"):
            fail(where, f"stream/group {meta.get('stream')}/{meta.get('consumerGroup')} are not the "
                        f"Deployment's {args.get('--stream')}/{args.get('--group')}")
    print(f"{path}: {len(scaled['spec']['triggers'])} triggers ({', '.join(sorted({t['type'] for t in scaled['spec']['triggers']}))}), "
          f"TriggerAuthentication ({', '.join(sorted(params))}): as KEDA reads them")


for path in sys.argv[1:]:
    check(path)
if failures:
    print("\n".join(failures), file=sys.stderr)
    sys.exit(1)
