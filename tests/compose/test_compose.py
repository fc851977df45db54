"""docker-compose.yml and the Dockerfiles, checked without a container engine: the file is
normalized by `docker-compose config` (Debian's docker-compose) and its services, ports,
health checks, dependencies and environment are asserted; native.sh then runs the same
topology natively, and containers.sh in containers."""

import os
import re
import subprocess
import zlib

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def config(**env):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("MUTEXD_HOST_PORT", "MUTEXD_HOST_PORT_B", "MUTEXD_HOST_PORT_C")}
    environ.update(env)
    out = subprocess.run(["docker-compose", "-f", os.path.join(ROOT, "docker-compose.yml"),
                          "config"], capture_output=True, text=True, check=True, env=environ)
    return yaml.safe_load(out.stdout)


SERVERS = ("mutexd-a", "mutexd-b", "mutexd-c")
# One worker in each client language, all electing one leader.
WORKERS = {"worker-python": "python", "worker-node": "node", "worker-go": "go",
           "worker-java": "java", "worker-dotnet": "dotnet"}


def test_services():
    c = config()
    assert set(c["services"]) == {"azurite", *WORKERS, *SERVERS}
    assert set(c["volumes"]) == {"azurite-data", "mutexd-a-data", "mutexd-b-data", "mutexd-c-data"}


def test_azurite_is_the_blob_service_with_a_volume():
    a = config()["services"]["azurite"]
    assert a["image"] == "mcr.microsoft.com/azure-storage/azurite"
    cmd = a["command"]
    assert cmd[0] == "azurite-blob"
    assert cmd[cmd.index("--blobHost") + 1] == "0.0.0.0"
    assert cmd[cmd.index("--location") + 1] == "/data"
    assert "azurite-data:/data:rw" in a["volumes"]
    assert a["healthcheck"]["test"][0] == "CMD"


def test_no_health_check_argument_has_a_space():
    """podman's Docker API (4.x) splits a health check's arguments at spaces: a `node -e`
    script with spaces then fails with a SyntaxError, and the service never turns healthy."""
    for name, s in config()["services"].items():
        test = s.get("healthcheck", {}).get("test", [])
        assert all(" " not in arg for arg in test[1:]), (name, test)


def published(port):
    """(host address, host port, container port) of a normalized port entry."""
    if isinstance(port, dict):
        return port["host_ip"], str(port["published"]), port["target"]
    host, published_port, target = port.split("/")[0].split(":")
    return host, published_port, int(target)


def test_the_servers_form_a_group():
    c = config()
    envs = {name: c["services"][name]["environment"] for name in SERVERS}
    for name in SERVERS:
        m = c["services"][name]
        assert m["image"] == "mutexd:local"
        assert m["build"]["args"]["BASE_IMAGE"].startswith("debian:bookworm")
        env = envs[name]
        assert env["MUTEXD_LISTEN"] == "0.0.0.0:8080"
        assert env["MUTEXD_DATA_DIR"] == "/var/lib/mutexd"
        # A group: --ha needs --mirror sync and the URL the others reach this one at.
        assert str(env["MUTEXD_HA"]) == "1"
        assert env["MUTEXD_MIRROR"] == "sync"
        # A partitioned group: 16 partitions over three servers, 5 or 6 each.
        assert str(env["MUTEXD_PARTITIONS"]) == "16"
        assert env["MUTEXD_ADVERTISE_URL"] == "http://%s:8080" % name
        cs = env["MUTEXD_BLOB_CONNECTION_STRING"]
        assert "BlobEndpoint=http://azurite:10000/devstoreaccount1" in cs
        assert "AccountName=devstoreaccount1" in cs
        # Each its own data directory (docs/ha.md, "Limits": a server of a group clears its store).
        assert m["volumes"] == ["%s-data:/var/lib/mutexd:rw" % name]
        assert m["depends_on"]["azurite"]["condition"] == "service_healthy"
        assert m["healthcheck"]["test"] == ["CMD", "mutexd", "--probe"]
    # The same blob container, the same everything but the advertised URL.
    same = [{k: v for k, v in e.items() if k != "MUTEXD_ADVERTISE_URL"} for e in envs.values()]
    assert all(e == same[0] for e in same)


def test_the_servers_ports():
    """Published on loopback only: 8080, 8081 and 8082, or MUTEXD_HOST_PORT,
    MUTEXD_HOST_PORT_B and MUTEXD_HOST_PORT_C."""
    def ports(**env):
        c = config(**env)
        return [[published(p) for p in c["services"][name]["ports"]] for name in SERVERS]

    assert ports() == [[("127.0.0.1", "8080", 8080)], [("127.0.0.1", "8081", 8080)],
                       [("127.0.0.1", "8082", 8080)]]
    assert ports(MUTEXD_HOST_PORT="9123") == [[("127.0.0.1", "9123", 8080)],
                                              [("127.0.0.1", "8081", 8080)],
                                              [("127.0.0.1", "8082", 8080)]]
    assert ports(MUTEXD_HOST_PORT="9123", MUTEXD_HOST_PORT_B="9124",
                 MUTEXD_HOST_PORT_C="9125") == [
        [("127.0.0.1", "9123", 8080)], [("127.0.0.1", "9124", 8080)],
        [("127.0.0.1", "9125", 8080)]]


def test_workers():
    services = config()["services"]
    envs = []
    for name, language in WORKERS.items():
        w = services[name]
        assert w.get("deploy", {}).get("replicas", 1) == 1
        assert w["build"]["dockerfile"].endswith("clients/examples/%s/Dockerfile" % language)
        # Every server of the group, as the clients take a list: comma-separated.
        assert w["environment"]["MUTEXD_URL"].split(",") == [
            "http://%s:8080" % s for s in SERVERS]
        assert w["environment"]["MUTEXD_RESOURCE"] == "leader-election/demo"
        assert int(w["environment"]["MUTEXD_TTL_MS"]) >= 1000
        # `docker stop` of the leader hands over within a follower's retry: under 2 s.
        assert float(w["environment"]["MUTEXD_RETRY_S"]) <= 1
        for s in SERVERS:
            assert w["depends_on"][s]["condition"] == "service_healthy"
        envs.append(w["environment"])
    # The five contend for one resource, with the same timings.
    assert all(e == envs[0] for e in envs)


def test_an_unknown_key_is_refused():
    bad = os.path.join(ROOT, "build", "compose-bad.yml")
    os.makedirs(os.path.dirname(bad), exist_ok=True)
    text = open(os.path.join(ROOT, "docker-compose.yml")).read().replace("    ports:", "    portz:")
    open(bad, "w").write(text)
    out = subprocess.run(["docker-compose", "-f", bad, "config"], capture_output=True, text=True)
    assert out.returncode != 0 and "portz" in out.stderr


def dockerfile(path):
    return open(os.path.join(ROOT, path)).read()


def test_server_dockerfile():
    d = dockerfile("Dockerfile")
    assert re.search(r"^ARG BASE_IMAGE=debian:bookworm-slim$", d, re.M)
    froms = re.findall(r"^FROM (\S+)(?: AS (\w+))?$", d, re.M)
    assert froms == [("${BASE_IMAGE}", "build"), ("${BASE_IMAGE}", "")]  # multi-stage
    runtime = d.split("FROM ${BASE_IMAGE}\n", 1)[1]
    assert "-dev" not in runtime  # only the shared libraries at run time
    assert re.search(r"^USER mutexd$", runtime, re.M)
    assert re.search(r"^VOLUME /var/lib/mutexd$", runtime, re.M)
    assert "MUTEXD_LISTEN=0.0.0.0:8080" in runtime
    assert re.search(r'^HEALTHCHECK .*\n\s+CMD \["mutexd", "--probe"\]', runtime, re.M)
    assert "org.opencontainers.image.title" in runtime
    # Every library the runtime stage installs is one the binary links.
    for lib in ["libmicrohttpd12", "libcjson1", "libsqlite3-0", "libcurl4", "libssl3"]:
        assert lib in runtime


def test_worker_dockerfiles():
    for language, program in (("python", "leader.py"), ("node", "leader.mjs"),
                              ("go", "clients/examples/go"),
                              ("java", "clients/examples/java/leader")):
        d = dockerfile("clients/examples/%s/Dockerfile" % language)
        assert re.search(r"^ARG BASE_IMAGE=", d, re.M), language
        assert re.search(r"^USER \w+", d, re.M), language
        assert re.search(r"^STOPSIGNAL SIGTERM$", d, re.M), language
        assert program in d, language
    # Go: built with Debian's Go and no downloads, a static binary in a stage of its own.
    d = dockerfile("clients/examples/go/Dockerfile")
    assert re.findall(r"^FROM (\S+)(?: AS (\w+))?$", d, re.M) == [
        ("${BASE_IMAGE}", "build"), ("${BASE_IMAGE}", "")]
    assert "golang-go" in d and "GOPROXY=off" in d and "CGO_ENABLED=0" in d
    assert "golang" not in d.split("\nFROM ${BASE_IMAGE}\n", 1)[1]
    # Java: built with Debian's JDK 17 (javac and jar, no Maven), run on its JRE alone.
    d = dockerfile("clients/examples/java/Dockerfile")
    assert re.findall(r"^FROM (\S+)(?: AS (\w+))?$", d, re.M) == [
        ("${BASE_IMAGE}", "build"), ("${BASE_IMAGE}", "")]
    build, runtime = d.split("\nFROM ${BASE_IMAGE}\n", 1)
    assert "openjdk-17-jdk-headless" in build and "leader/build.sh" in build
    assert "openjdk-17-jre-headless" in runtime and "jdk-headless" not in runtime
    assert "mvn" not in d
    # .NET: Microsoft's images, SDK to publish and runtime to run, as their user; the
    # client's project built with the worker, nothing downloaded (no package reference).
    d = dockerfile("clients/examples/dotnet/Dockerfile")
    assert re.findall(r"^FROM (\S+)(?: AS (\w+))?$", d, re.M) == [
        ("${SDK_IMAGE}", "build"), ("${RUNTIME_IMAGE}", "")]
    assert re.search(r"^ARG SDK_IMAGE=mcr.microsoft.com/dotnet/sdk:10.0$", d, re.M)
    assert re.search(r"^ARG RUNTIME_IMAGE=mcr.microsoft.com/dotnet/runtime:10.0$", d, re.M)
    build, runtime = d.split("\nFROM ${RUNTIME_IMAGE}\n", 1)
    assert "dotnet publish clients/examples/dotnet/leader" in build
    assert re.search(r"^USER \$APP_UID$", runtime, re.M)
    assert re.search(r"^STOPSIGNAL SIGTERM$", runtime, re.M)
    assert '"/app/Leader.dll"' in runtime
    for proj in ("clients/dotnet/Mutexd.Client/Mutexd.Client.csproj",
                 "clients/examples/dotnet/leader/Leader.csproj"):
        assert "PackageReference" not in open(os.path.join(ROOT, proj)).read(), proj


def test_runtime_libraries_match_the_binary():
    """The Debian packages the runtime stage installs provide every shared library the
    built server needs (so the image starts)."""
    out = subprocess.run(["ldd", os.path.join(ROOT, "build", "mutexd")], capture_output=True,
                         text=True, check=True).stdout
    needed = {re.match(r"\s*(\S+)", l).group(1) for l in out.splitlines() if "=>" in l}
    provided = set()
    for pkg in ["libmicrohttpd12", "libcjson1", "libsqlite3-0", "libcurl4", "libssl3", "libc6"]:
        files = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True).stdout
        provided |= {os.path.basename(f) for f in files.split()}
    # The rest come in as dependencies of those packages; check ours directly.
    ours = {n for n in needed if re.match(r"lib(microhttpd|cjson|sqlite3|curl|ssl|crypto)\.", n)}
    assert ours and ours <= provided, ours - provided


def section(text, title):
    return text.split("\n## %s\n" % title, 1)[1].split("\n## ", 1)[0]


def test_tutorial_and_header_say_what_the_container_stage_runs():
    """The tutorial's "With docker compose" commands are those tests/compose/containers.sh
    runs (and containers_check.py: the servers' shares of the partitions, the kill of the
    server that serves the leader's resource); containers are stopped and killed by name
    (`docker compose stop` takes services). The README's paragraph names the two commands
    and leads there."""
    readme = section(open(os.path.join(ROOT, "docs", "tutorial.md")).read(),
                     "With docker compose")
    stage = open(os.path.join(ROOT, "tests", "compose", "containers.sh")).read()
    header = "".join(l for l in open(os.path.join(ROOT, "docker-compose.yml"))
                     if l.startswith("#"))
    for cmd in ["docker compose build", "docker compose up -d"]:
        assert cmd in readme and cmd in header and re.search(r"^%s\b" % cmd, stage, re.M), cmd
    for text in (readme, header):
        assert "docker stop" in text and "docker kill" in text and "docker ps" in text
        assert "/v1/resources/leader-election/demo" in text
        # The partition map, and which server serves the leader's resource, to kill it.
        assert "curl -s http://127.0.0.1:8080/v1/servers" in text
        assert "partitions" in text and "owners" in text
        assert "Mutexd-Partition" in text and "Mutexd-Served-By" in text
        assert "/ui/" in text
        assert "mutexd-c" in text and "8082" in text
        assert not re.search(r"docker compose stop <", text)
    assert "docker start" in readme
    assert "docker compose down -v" in readme and "docker compose down -v" in stage
    brief = section(open(os.path.join(ROOT, "README.md")).read(), "With docker compose")
    assert "docker compose build" in brief and "docker compose up -d" in brief
    assert "(docs/tutorial.md#with-docker-compose)" in brief


def test_the_demo_resources_partition_is_the_one_the_header_names():
    """The header names the partition of the workers' resource: CRC-32 of its name modulo
    the partition count (docs/api.md, "Partitions"; the name has no hash tag)."""
    c = config()
    env = c["services"]["worker-python"]["environment"]
    n = int(c["services"]["mutexd-a"]["environment"]["MUTEXD_PARTITIONS"])
    resource = env["MUTEXD_RESOURCE"]
    assert "{" not in resource
    header = "".join(l for l in open(os.path.join(ROOT, "docker-compose.yml"))
                     if l.startswith("#"))
    assert "partition (%d)" % (zlib.crc32(resource.encode()) % n) in header
