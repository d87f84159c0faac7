#!/usr/bin/env python3
"""Checks the Kubernetes recipe (deploy/kubernetes) and prints what a test compares with the daemon.

Renders it with `kubectl kustomize` (offline), validates every object against the Kubernetes API's
JSON schemas with kubernetes-validate (strict: an unknown field is an error; the schemas ship with
the package: `pip install -r tests/peers/requirements-k8s.txt`), checks that its pieces agree with
each other (probes name ports that exist, the config listens where the container's ports are, the
grace period covers unready_delay and drain_timeout, every file the config names is mounted, the
peer URL names the headless service, which publishes replicas that are not ready), and prints one
JSON document on stdout:

    ports                          {"http": 7332, "admin": 7333}
    probes                         {"startup"|"readiness"|"liveness": {"path", "port", ...}}
    terminationGracePeriodSeconds  30
    config                         the text of mcpmux.toml in the ConfigMap
    secret_keys                    the keys of the Secret the pods mount
    (and a few more: replicas, args, config_path, secret_mount, service_name, validated_against)

Any problem: a message per problem on stderr, exit status 1 (2 when a tool is missing).

Usage: tests/cluster/manifests.py [--dir DIR] [--kubectl KUBECTL]
"""

import argparse
import json
import posixpath
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Kubernetes versions the objects must be valid for: the oldest one supported here and the
# newest kubernetes-validate knows.
VERSIONS = ("1.30.0", "1.37.0")
CONTAINER = "mcpmux"


class Problems(Exception):
    """Every problem found, each a sentence."""

    def __init__(self, problems):
        super().__init__("\n".join(problems))
        self.problems = problems


def fail_tool(message):
    print(f"manifests.py: {message}", file=sys.stderr)
    sys.exit(2)


def render(directory, kubectl):
    try:
        done = subprocess.run(
            [kubectl, "kustomize", str(directory)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except FileNotFoundError:
        fail_tool(f"`{kubectl}` not found: install kubectl (it renders the kustomization offline)")
    if done.returncode != 0:
        raise Problems([f"`kubectl kustomize {directory}` failed: {done.stderr.strip()}"])
    import yaml

    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def validate(objects):
    try:
        import kubernetes_validate
    except ImportError:
        fail_tool(
            "kubernetes-validate is not installed: pip install -r tests/peers/requirements-k8s.txt"
        )
    problems = []
    for obj in objects:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                where = ".".join(str(p) for p in e.path) or "(top)"
                problems.append(f"{name} is not valid Kubernetes {version}: {where}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError as e:
                problems.append(f"{name}: {e.message}")
    if problems:
        raise Problems(problems)
    return [v.rsplit(".", 1)[0] for v in VERSIONS]


def one(objects, kind, name=None):
    found = [
        o
        for o in objects
        if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    if len(found) != 1:
        what = f"{kind} {name}" if name else kind
        raise Problems([f"expected exactly one {what}, found {len(found)}"])
    return found[0]


DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|msec|s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hr|hrs|hour|hours)")
UNIT = {"ms": 0.001, "msec": 0.001, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
        "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
        "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600}


def seconds(text, key, problems):
    """A humantime duration ("5s", "1m 30s", "500ms") in seconds."""
    text = str(text).strip()
    parts = DURATION.findall(text)
    if not parts or DURATION.sub("", text).strip():
        problems.append(f"{key} = {text!r} is not a duration like \"5s\"")
        return 0.0
    return sum(float(n) * UNIT[u] for n, u in parts)


def port_of(address, key, problems):
    match = re.fullmatch(r".*:(\d+)", str(address))
    if not match:
        problems.append(f"{key} = {address!r} has no port")
        return None
    return int(match.group(1))


def probe(container, kind, ports, problems):
    spec = container.get(f"{kind}Probe")
    if not spec:
        problems.append(f"container {CONTAINER} has no {kind}Probe")
        return None
    get = spec.get("httpGet")
    if not get:
        problems.append(f"{kind}Probe is not an httpGet probe")
        return None
    port = get.get("port")
    if isinstance(port, str):
        if port not in ports:
            problems.append(f"{kind}Probe names port {port!r}, which the container does not have")
        port = ports.get(port)
    elif port not in ports.values():
        problems.append(f"{kind}Probe uses port {port}, which the container does not declare")
    return {
        "path": get.get("path"),
        "port": port,
        "periodSeconds": spec.get("periodSeconds", 10),
        "timeoutSeconds": spec.get("timeoutSeconds", 1),
        "failureThreshold": spec.get("failureThreshold", 3),
        "successThreshold": spec.get("successThreshold", 1),
    }


def mounted(path, mounts):
    """The mount `path` lies under (the longest), if any."""
    best = None
    for m in mounts:
        root = m["mountPath"].rstrip("/") or "/"
        if path == root or path.startswith(root + "/"):
            if best is None or len(root) > len(best["mountPath"]):
                best = m
    return best


def file_paths(table, prefix=""):
    """(key, path) for every key of the config that names a file."""
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from file_paths(value, name + ".")
        elif isinstance(value, str) and (key.endswith("_file") or key in ("cursor_keys", "jwks_file")):
            yield name, value


class Pod:
    """The StatefulSet's pod template, its mcpmux container and what they mount."""

    def __init__(self, objects):
        self.sts = one(objects, "StatefulSet")
        self.spec = self.sts["spec"]["template"]["spec"]
        found = [c for c in self.spec["containers"] if c["name"] == CONTAINER]
        if len(found) != 1:
            raise Problems([f"the StatefulSet has no container named {CONTAINER}"])
        self.container = found[0]
        self.ports = {
            p["name"]: p["containerPort"] for p in self.container.get("ports", []) if "name" in p
        }
        self.volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        self.mounts = self.container.get("volumeMounts", [])
        self.args = self.container.get("args", [])

    def volume_at(self, path):
        """The mount `path` is under and its volume, or (None, {})."""
        mount = mounted(path, self.mounts)
        return mount, (self.volumes.get(mount["name"], {}) if mount else {})


def check_probes(pod, problems):
    probes = {k: probe(pod.container, k, pod.ports, problems) for k in PROBE_PATHS}
    for kind, path in PROBE_PATHS.items():
        if probes[kind] and probes[kind]["path"] != path:
            problems.append(f"{kind}Probe asks {probes[kind]['path']}, not {path}")
    return probes


PROBE_PATHS = {"startup": "/healthz", "readiness": "/readyz", "liveness": "/healthz"}


def read_config(objects, pod):
    """--config's path, the text of the ConfigMap key mounted there, and the text parsed."""
    if "--config" not in pod.args or pod.args.index("--config") + 1 >= len(pod.args):
        raise Problems(["the container's args name no --config file"])
    path = pod.args[pod.args.index("--config") + 1]
    mount, volume = pod.volume_at(path)
    if "configMap" not in volume:
        raise Problems([f"--config {path} is not in a mounted ConfigMap"])
    configmap = one(objects, "ConfigMap", volume["configMap"]["name"])
    key = posixpath.relpath(path, mount["mountPath"])
    text = configmap.get("data", {}).get(key)
    if text is None:
        raise Problems([f"ConfigMap {configmap['metadata']['name']} has no key {key}"])
    try:
        import tomllib
    except ImportError:
        fail_tool("Python 3.11 or later is needed (tomllib)")
    try:
        return path, text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise Problems([f"{key} in the ConfigMap is not TOML: {e}"])


def read_secret(objects, pod):
    """Where the pod mounts its one Secret, its name and its keys."""
    mounts = [
        (m, pod.volumes[m["name"]]["secret"]["secretName"])
        for m in pod.mounts
        if "secret" in pod.volumes.get(m["name"], {})
    ]
    if len(mounts) != 1:
        raise Problems([f"expected one mounted Secret, found {len(mounts)}"])
    mount, name = mounts[0]
    secret = one(objects, "Secret", name)
    return mount, name, sorted(set(secret.get("stringData", {})) | set(secret.get("data", {})))


def check_listeners(config, pod, problems):
    """The config listens where the container's ports are, beyond loopback."""
    for table, port, default in (("server", "http", "127.0.0.1:7332"), ("admin", "admin", "127.0.0.1:7333")):
        listen = config.get(table, {}).get("listen", default)
        if port_of(listen, f"{table}.listen", problems) != pod.ports.get(port):
            problems.append(
                f"{table}.listen {listen!r} is not on the container's {port} port {pod.ports.get(port)}"
            )
        if str(listen).startswith("127."):
            problems.append(f"{table}.listen is on loopback: nothing outside the pod reaches it")


def check_cluster(config, pod, problems):
    """[cluster] names no replica (the pod's name is) and reaches peers on the headless service."""
    cluster = config.get("cluster", {})
    if not cluster:
        problems.append("the config has no [cluster] table")
    if "replica" in cluster:
        problems.append("[cluster] replica is set: on Kubernetes leave it to the pod's name")
    url = cluster.get("peer_url", "")
    service = pod.sts["spec"].get("serviceName")
    namespace = pod.sts["metadata"].get("namespace")
    if "{replica}" not in url:
        problems.append(f"[cluster] peer_url {url!r} has no {{replica}}")
    if f"{{replica}}.{service}." not in url:
        problems.append(f"[cluster] peer_url {url!r} does not name the headless service {service}")
    named = re.search(r"\{replica\}\.[^./:]+\.([^./:]+)\.svc\b", url)
    if namespace and named and named.group(1) != namespace:
        problems.append(f"[cluster] peer_url {url!r} names namespace {named.group(1)}, not {namespace}")
    authority = url.split("/", 3)[2] if "//" in url else url
    if url and port_of(authority, "cluster.peer_url", problems) != pod.ports.get("http"):
        problems.append(f"[cluster] peer_url {url!r} is not on the http port {pod.ports.get('http')}")


def check_services(objects, pod, problems):
    """The headless service lists draining replicas; every service selects and targets them."""
    service = pod.sts["spec"].get("serviceName")
    headless = one(objects, "Service", service)
    if headless["spec"].get("clusterIP") != "None":
        problems.append(f"Service {service} (the StatefulSet's serviceName) is not headless")
    if headless["spec"].get("publishNotReadyAddresses") is not True:
        problems.append(
            f"Service {service} does not publish replicas that are not ready: "
            "peers could not reach an owner that is draining"
        )
    labels = pod.sts["spec"]["template"]["metadata"].get("labels", {})
    for svc in (o for o in objects if o["kind"] == "Service"):
        name = svc["metadata"]["name"]
        if any(labels.get(k) != v for k, v in svc["spec"].get("selector", {}).items()):
            problems.append(f"Service {name} selects no replica")
        for p in svc["spec"].get("ports", []):
            target = p.get("targetPort", p["port"])
            known = pod.ports if isinstance(target, str) else pod.ports.values()
            if target not in known:
                problems.append(f"Service {name} targets port {target!r}, which the container does not have")


def check_shutdown(config, pod, probes, problems):
    """The grace period covers the drain; readiness notices the drain within unready_delay."""
    grace = pod.spec.get("terminationGracePeriodSeconds", 30)
    unready = seconds(config.get("cluster", {}).get("unready_delay", "2s"), "cluster.unready_delay", problems)
    drain = seconds(config.get("server", {}).get("drain_timeout", "10s"), "server.drain_timeout", problems)
    stop = seconds(config.get("defaults", {}).get("shutdown_grace", "2s"), "defaults.shutdown_grace", problems)
    if grace < unready + drain + stop:
        problems.append(
            f"terminationGracePeriodSeconds {grace} < unready_delay {unready:g}s"
            f" + drain_timeout {drain:g}s + shutdown_grace {stop:g}s"
        )
    readiness = probes.get("readiness")
    if readiness:
        noticed = readiness["periodSeconds"] * readiness["failureThreshold"]
        if noticed >= unready:
            problems.append(
                f"the readiness probe notices a drain after {noticed}s, not within unready_delay {unready:g}s"
            )
    return grace


def check_files(config, pod, secret, problems):
    """Every file the config names is mounted: in the Secret (as one of its keys), on an empty
    volume an init container writes, or on another volume; state_dir is on a volume claim."""
    secret_mount, secret_name, secret_keys = secret
    init_mounts = {m["name"] for c in pod.spec.get("initContainers", []) for m in c.get("volumeMounts", [])}
    for name, path in file_paths(config):
        mount, volume = pod.volume_at(path)
        if mount is None:
            problems.append(f"{name} = {path!r} is on no volume of the container")
        elif mount is secret_mount:
            if posixpath.relpath(path, mount["mountPath"]) not in secret_keys:
                problems.append(f"{name} = {path!r}: the Secret {secret_name} has no such key")
        elif "emptyDir" in volume and mount["name"] not in init_mounts:
            problems.append(f"{name} = {path!r} is on an empty volume no init container writes")
    if "cursor_keys" in config.get("server", {}) and "cursor.keys" not in secret_keys:
        problems.append(f"the Secret {secret_name} has no cursor.keys")
    state_dir = config.get("state_dir")
    if state_dir:
        mount, _ = pod.volume_at(state_dir)
        claims = {c["metadata"]["name"] for c in pod.sts["spec"].get("volumeClaimTemplates", [])}
        if mount is None or mount["name"] not in claims:
            problems.append(f"state_dir {state_dir!r} is not on a volume claim of the StatefulSet")


def summarise(objects, validated):
    pod = Pod(objects)
    problems = []
    for port in ("http", "admin"):
        if port not in pod.ports:
            problems.append(f"container {CONTAINER} has no port named {port}")
    probes = check_probes(pod, problems)
    config_path, text, config = read_config(objects, pod)
    secret = read_secret(objects, pod)
    check_listeners(config, pod, problems)
    check_cluster(config, pod, problems)
    check_services(objects, pod, problems)
    grace = check_shutdown(config, pod, probes, problems)
    check_files(config, pod, secret, problems)
    if problems:
        raise Problems(problems)
    return {
        "statefulset": pod.sts["metadata"]["name"],
        "namespace": pod.sts["metadata"].get("namespace"),
        "replicas": pod.sts["spec"].get("replicas", 1),
        "service_name": pod.sts["spec"].get("serviceName"),
        "args": pod.args,
        "ports": pod.ports,
        "probes": probes,
        "terminationGracePeriodSeconds": grace,
        "config_path": config_path,
        "config": text,
        "secret_mount": secret[0]["mountPath"],
        "secret_keys": secret[2],
        "validated_against": validated,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=str(REPO / "deploy" / "kubernetes"))
    parser.add_argument("--kubectl", default="kubectl")
    options = parser.parse_args()
    try:
        objects = render(options.dir, options.kubectl)
        validated = validate(objects)
        summary = summarise(objects, validated)
    except Problems as e:
        for problem in e.problems:
            print(f"manifests.py: {problem}", file=sys.stderr)
        sys.exit(1)
    json.dump(summary, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
