"""docker-compose.yml and the Dockerfiles, checked without a container engine: the file is
normalized by `docker-compose config` (Debian's docker-compose) and its services, ports,
health checks, dependencies and environment are asserted; native.sh then runs the same
topology natively, and containers.sh in containers."""

import os
import re
import subprocess

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def config(**env):
    environ = {k: v for k, v in os.environ.items() if k != "MUTEXD_HOST_PORT"}
    environ.update(env)
    out = subprocess.run(["docker-compose", "-f", os.path.join(ROOT, "docker-compose.yml"),
                          "config"], capture_output=True, text=True, check=True, env=environ)
    return yaml.safe_load(out.stdout)


def test_services():
    c = config()
    assert set(c["services"]) == {"azurite", "mutexd", "worker"}
    assert set(c["volumes"]) == {"azurite-data", "mutexd-data"}


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


def test_mutexd_service():
    m = config()["services"]["mutexd"]
    assert m["build"]["args"]["BASE_IMAGE"].startswith("debian:bookworm")
    env = m["environment"]
    assert env["MUTEXD_LISTEN"] == "0.0.0.0:8080"
    assert env["MUTEXD_DATA_DIR"] == "/var/lib/mutexd"
    assert env["MUTEXD_MIRROR"] in ("async", "sync")
    cs = env["MUTEXD_BLOB_CONNECTION_STRING"]
    assert "BlobEndpoint=http://azurite:10000/devstoreaccount1" in cs
    assert "AccountName=devstoreaccount1" in cs
    # Published on loopback only.
    ports = m["ports"]
    assert len(ports) == 1
    p = ports[0]
    if isinstance(p, dict):
        assert (p["host_ip"], str(p["published"]), p["target"]) == ("127.0.0.1", "8080", 8080)
    else:
        assert p in ("127.0.0.1:8080:8080", "127.0.0.1:8080:8080/tcp")
    # MUTEXD_HOST_PORT picks another port of the host, still on loopback.
    (p,) = config(MUTEXD_HOST_PORT="9123")["services"]["mutexd"]["ports"]
    if isinstance(p, dict):
        assert (p["host_ip"], str(p["published"]), p["target"]) == ("127.0.0.1", "9123", 8080)
    else:
        assert p in ("127.0.0.1:9123:8080", "127.0.0.1:9123:8080/tcp")
    assert "mutexd-data:/var/lib/mutexd:rw" in m["volumes"]
    assert m["depends_on"]["azurite"]["condition"] == "service_healthy"
    assert m["healthcheck"]["test"] == ["CMD", "mutexd", "--probe"]


def test_workers():
    w = config()["services"]["worker"]
    assert w["deploy"]["replicas"] == 3
    assert w["build"]["dockerfile"].endswith("clients/examples/python/Dockerfile")
    assert w["environment"]["MUTEXD_URL"] == "http://mutexd:8080"
    assert w["environment"]["MUTEXD_RESOURCE"] == "leader-election/demo"
    assert int(w["environment"]["MUTEXD_TTL_MS"]) >= 1000
    # `docker stop` of the leader hands over within a follower's retry: under 2 s.
    assert float(w["environment"]["MUTEXD_RETRY_S"]) <= 1
    assert w["depends_on"]["mutexd"]["condition"] == "service_healthy"


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


def test_worker_dockerfile():
    d = dockerfile("clients/examples/python/Dockerfile")
    assert re.search(r"^ARG BASE_IMAGE=", d, re.M)
    assert re.search(r"^USER \w+", d, re.M)
    assert "leader.py" in d


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


def test_readme_and_header_say_what_the_container_stage_runs():
    """The README's "With docker compose" commands are those tests/compose/containers.sh
    runs; containers are stopped and killed by name (`docker compose stop` takes services)."""
    readme = section(open(os.path.join(ROOT, "README.md")).read(), "With docker compose")
    stage = open(os.path.join(ROOT, "tests", "compose", "containers.sh")).read()
    header = "".join(l for l in open(os.path.join(ROOT, "docker-compose.yml"))
                     if l.startswith("#"))
    for cmd in ["docker compose build", "docker compose up -d"]:
        assert cmd in readme and cmd in header and re.search(r"^%s\b" % cmd, stage, re.M), cmd
    for text in (readme, header):
        assert "docker stop" in text and "docker kill" in text and "docker ps" in text
        assert "/v1/resources/leader-election/demo" in text
        assert not re.search(r"docker compose stop <", text)
    assert "docker compose down -v" in readme and "docker compose down -v" in stage
