"""Turns the rendered azurite overlay (deploy/kubernetes/azurite, `kubectl kustomize`) into
the pods Kubernetes would run from it, one YAML file a pod, for `podman kube play`: the
StatefulSet's template as its pods mutexd-0, -1, -2, the Azurite Deployment's as the pod
azurite, and four leader-election workers (the compose file's, one a language) that
know every server's advertised URL.

The pod template is taken as it is; only what the cluster would supply, and podman 4.3
does not, is done here:
  - the StatefulSet's pods: the name <set>-<ordinal>, used as the host name, and their
    labels;
  - cluster DNS: every pod gets the others' names under the headless Service
    (mutexd-0.mutexd-hl.default.svc ...) and the Azurite Service's name as hostAliases, to
    the static addresses kube.sh gives the pods on a network of their own;
  - environment: podman 4.3 refuses fieldRef metadata.namespace, fails secretKeyRef on a
    Secret of the YAML (it wants JSON), and does not expand $(VAR): the values are put in
    as the kubelet would (envFrom first, then env in order, $(VAR) of those before);
  - Secret volumes (podman 4.3 crashes on them): the Secret's keys written as files, with
    the volume's defaultMode, into a folder mounted read-only at the same place;
  - emptyDir volumes: podman 4.3 makes each a named volume of the volume's name, shared by
    every pod that names one alike (the servers' data directories, and Azurite's): each
    is renamed <project>-<pod>-<volume>, so that each pod has its own, as on a cluster;
  - each server's port 8080 published on a loopback port of this machine, for the checks.
Each pod also gets the labels com.docker.compose.project and com.docker.compose.service,
through which tests/compose/containers_check.py finds the containers.

    kube_pods.py RENDERED OUTDIR SUBNET_PREFIX PROJECT PORT0 PORT1 PORT2
writes OUTDIR/<pod>.yaml and prints "<pod> <address>" lines."""

import base64
import copy
import os
import re
import sys

import yaml

NAMESPACE = "default"
WORKERS = {"worker-python": "docker.io/library/mutexdtest_worker-python:latest",
           "worker-node": "docker.io/library/mutexdtest_worker-node:latest",
           "worker-go": "docker.io/library/mutexdtest_worker-go:latest",
           "worker-dotnet": "docker.io/library/mutexdtest_worker-dotnet:latest"}
for _w in os.environ.get("CONTAINERS_WORKERS_LEFT_OUT", "").split():
    WORKERS.pop(_w, None)  # tests/deploy/kube.sh says why
TOKEN = "try-it-token-not-for-production"


def expand(value, env):
    """Kubernetes' $(VAR) expansion: $$ is a literal $, unknown references stay."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, value)


def resolve_env(container, pod_name, secrets, configmaps):
    env = {}
    order = []

    def put(k, v):
        if k not in env:
            order.append(k)
        env[k] = v
    for src in container.pop("envFrom", []) or []:
        ref = src.get("configMapRef") or src.get("secretRef")
        data = (configmaps if "configMapRef" in src else secrets)[ref["name"]]
        for k, v in data.items():
            put(src.get("prefix", "") + k, v)
    for e in container.get("env", []) or []:
        if "value" in e:
            put(e["name"], expand(e["value"], env))
            continue
        vf = e["valueFrom"]
        if "fieldRef" in vf:
            path = vf["fieldRef"]["fieldPath"]
            put(e["name"], {"metadata.name": pod_name, "metadata.namespace": NAMESPACE}[path])
        elif "secretKeyRef" in vf:
            put(e["name"], secrets[vf["secretKeyRef"]["name"]][vf["secretKeyRef"]["key"]])
        elif "configMapKeyRef" in vf:
            put(e["name"], configmaps[vf["configMapKeyRef"]["name"]][vf["configMapKeyRef"]["key"]])
        else:
            raise SystemExit("kube_pods: env %s: %s is not supported" % (e["name"], vf))
    container["env"] = [{"name": k, "value": env[k]} for k in order]
    return env


def secret_volumes(spec, pod_name, secrets, outdir):
    for v in spec.get("volumes", []) or []:
        if "secret" not in v:
            continue
        s = v.pop("secret")
        data = secrets[s["secretName"]]
        folder = os.path.join(outdir, "secrets", pod_name, v["name"])
        os.makedirs(folder, mode=0o755)
        items = s.get("items") or [{"key": k, "path": k} for k in data]
        for it in items:
            path = os.path.join(folder, it["path"])
            with open(path, "w") as f:
                f.write(data[it["key"]])
            os.chmod(path, it.get("mode", s.get("defaultMode", 0o644)))
        # The folders above it: traversable by the pod's user, writable by root only.
        for d in (os.path.join(outdir, "secrets", pod_name), os.path.join(outdir, "secrets"), outdir):
            os.chmod(d, 0o755)
        v["hostPath"] = {"path": folder, "type": "Directory"}


def own_empty_dirs(spec, prefix):
    renamed = {}
    for v in spec.get("volumes", []) or []:
        if "emptyDir" in v:
            renamed[v["name"]] = v["name"] = "%s-%s" % (prefix, v["name"])
    for c in spec["containers"]:
        for m in c.get("volumeMounts", []) or []:
            m["name"] = renamed.get(m["name"], m["name"])


def pod(name, template, labels, hosts, outdir, secrets, configmaps, port=None):
    spec = copy.deepcopy(template["spec"])
    spec["hostname"] = name
    spec["hostAliases"] = [{"ip": ip, "hostnames": [h]} for h, ip in hosts.items()]
    for c in spec["containers"]:
        resolve_env(c, name, secrets, configmaps)
        if port is not None:
            for p in c.get("ports", []):
                if p["containerPort"] == 8080:
                    p["hostPort"] = port
                    p["hostIP"] = "127.0.0.1"
    secret_volumes(spec, name, secrets, outdir)
    own_empty_dirs(spec, "%s-%s" % (labels["com.docker.compose.project"], name))
    meta = {"name": name, "labels": dict(template.get("metadata", {}).get("labels", {}), **labels)}
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    with open(os.path.join(outdir, name + ".yaml"), "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)


def main():
    rendered, outdir, prefix, project = sys.argv[1:5]
    ports = [int(p) for p in sys.argv[5:]]
    docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
    secrets = {d["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in d.get("data", {}).items()}
               for d in docs if d["kind"] == "Secret"}
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    (az,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "azurite"]
    n = sts["spec"]["replicas"]
    if len(ports) != n:
        raise SystemExit("kube_pods: %d ports for %d servers" % (len(ports), n))
    servers = ["%s-%d" % (sts["metadata"]["name"], i) for i in range(n)]
    ips = {}
    for i, name in enumerate(["azurite"] + servers + list(WORKERS)):
        ips[name] = "%s%d" % (prefix, 10 + i)
    # The names cluster DNS would answer: the Services' and, under the headless one, the pods'.
    hosts = {"azurite": ips["azurite"]}
    for s in servers:
        hosts["%s.%s.%s.svc" % (s, sts["spec"]["serviceName"], NAMESPACE)] = ips[s]
    compose = lambda service: {"com.docker.compose.project": project,
                               "com.docker.compose.service": service}
    pod("azurite", az["spec"]["template"], compose("azurite"), hosts, outdir, secrets, configmaps)
    urls = []
    for i, s in enumerate(servers):
        pod(s, sts["spec"]["template"], compose(s), hosts, outdir, secrets, configmaps, ports[i])
        with open(os.path.join(outdir, s + ".yaml")) as f:
            env = {e["name"]: e["value"] for e in yaml.safe_load(f)["spec"]["containers"][0]["env"]}
        urls.append(env["MUTEXD_ADVERTISE_URL"])
    for w, image in WORKERS.items():
        template = {"spec": {"containers": [{"name": "worker", "image": image, "env": [
            {"name": "MUTEXD_URL", "value": ",".join(urls)},
            {"name": "MUTEXD_RESOURCE", "value": "leader-election/demo"},
            {"name": "MUTEXD_TTL_MS", "value": "10000"},
            {"name": "MUTEXD_RETRY_S", "value": "1"},
            {"name": "MUTEXD_TOKEN", "value": TOKEN}]}]}}
        pod(w, template, compose(w), hosts, outdir, secrets, configmaps)
    for name, ip in ips.items():
        print(name, ip)


if __name__ == "__main__":
    main()
