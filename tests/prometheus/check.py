#!/usr/bin/env python3
"""A real Prometheus (Debian's) scrapes two simulated Lanes nodes on one PostgreSQL and evaluates
deploy/prometheus/alerts.yml. Every query of the Grafana dashboard must return data; then each
alert's condition is made true (a card failing, a card hot at its power cap, an unbooked
process, an idle booking, a queue job that cannot start, faults injected into cards (an Xid,
a pending remap), a node killed, the database gone) and
every alert must fire. The rules run as shipped except that each `for:` is 0s, so the test
checks the conditions, and promtool's unit tests (alerts.test.yml) check the durations.

Usage: check.py LANES_BINARY POSTGRES_URL"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LANES, PG = sys.argv[1], sys.argv[2]
DB = f"lanes_prometheus_{os.getpid()}"
DB_URL = re.sub(r"/[^/]*$", f"/{DB}", PG)
PASSWORD = "prometheus passphrase"
children = []
work = tempfile.mkdtemp(prefix="lanes-prometheus-")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(sql):
    subprocess.run(["psql", PG, "-qtAc", sql], check=True, stdout=subprocess.DEVNULL)


def wait_for(what, check, timeout=60):
    deadline = time.time() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.time() > deadline:
            sys.exit(f"FAIL: {what() if callable(what) else what} within {timeout} s")
        time.sleep(0.5)


def start(args, log):
    child = subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    children.append(child)
    return child


def get(url, opener=None, data=None, method=None):
    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("content-type", "application/json")
    try:
        with (opener or urllib.request.build_opener()).open(req, timeout=5) as resp:
            text = resp.read()
            try:
                return resp.status, json.loads(text) if text else None
            except ValueError:
                return resp.status, text.decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, None


def node(name, gpus, extra):
    port = free_port()
    data = os.path.join(work, name)
    os.makedirs(data, mode=0o700)
    start([LANES, "serve", "--database-url", DB_URL, "--data-dir", data, "--node-name", name,
           "--gpus", gpus, "--listen", f"127.0.0.1:{port}", "--node-timeout", "2s",
           "--poll-interval", "500ms", "--sim-background", "false", *extra],
          os.path.join(work, f"{name}.log"))
    base = f"http://127.0.0.1:{port}"
    wait_for(f"node {name} answering", lambda: get(base + "/healthz")[0] == 200)
    return base, port


def main():
    psql(f"CREATE DATABASE {DB}")
    add = subprocess.run([LANES, "user", "add", "--username", "admin", "--admin", "--unix-user",
                          "nobody", "--password-stdin", "--database-url", DB_URL],
                         input=PASSWORD + "\n", text=True, capture_output=True)
    assert add.returncode == 0, add.stderr
    a, a_port = node("a", "sim:4", ["--sim-faulty-gpu", "0", "--sim-hot-gpu", "1"])
    b, b_port = node("b", "sim:2", [])

    admin = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    status, _ = get(a + "/api/v1/auth/login", admin, {"username": "admin", "password": PASSWORD})
    assert status == 200, status

    # Prometheus, with the shipped rules, every `for:` cut to 0s.
    rules = open(os.path.join(ROOT, "deploy/prometheus/alerts.yml")).read()
    rules = re.sub(r"for: \d+[smh]", "for: 0s", rules)
    names = re.findall(r"- alert: (\w+)", rules)
    open(os.path.join(work, "alerts.yml"), "w").write(rules)
    prom_port = free_port()
    open(os.path.join(work, "prometheus.yml"), "w").write(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [{work}/alerts.yml]
scrape_configs:
  - job_name: lanes
    static_configs: [{{targets: ["127.0.0.1:{a_port}", "127.0.0.1:{b_port}"]}}]
""")
    start(["prometheus", f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/tsdb",
           f"--web.listen-address=127.0.0.1:{prom_port}"], os.path.join(work, "prometheus.log"))
    prom = f"http://127.0.0.1:{prom_port}"
    wait_for("Prometheus ready", lambda: get(prom + "/-/ready")[0] == 200)

    def query(expr):
        status, body = get(prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        return body["data"]["result"] if status == 200 else []

    # The conditions: an idle booking (idle after 2 s under 5 %), an unbooked process, a queue
    # job of four cards that node a (one card down, one booked) and node b (two) cannot start.
    status, policy = get(a + "/api/v1/policy", admin)
    policy.update(idle_window_s=2)
    assert get(a + "/api/v1/policy", admin, policy, "PUT")[0] == 200
    status, gpus = get(a + "/api/v1/gpus", admin)
    cards = [g["uuid"] for g in gpus if g.get("node", "a") == "a"]
    now = time.time()
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    status, body = get(a + "/api/v1/bookings", admin,
                       {"gpus": [cards[3]], "start": iso(now), "end": iso(now + 3600)})
    assert status == 201, body
    status, body = get(a + "/api/v1/sim/processes", admin,
                       {"gpu": cards[2], "user": "mallory", "command": "python"})
    assert status == 201, body
    # Card health: an Xid of the card fails (and drains) one; a remap waits for a reset on
    # another. (Card 0, failing every reading, is degraded.)
    for fault in ({"fault": "xid", "gpu": cards[1], "xid": 79},
                  {"fault": "remap_pending", "gpu": cards[2]}):
        status, body = get(a + "/api/v1/sim/faults", admin, fault)
        assert status == 204, body
    status, body = get(a + "/api/v1/queue", admin,
                       {"gpus": 4, "time_limit_s": 600, "argv": ["sleep", "600"]})
    assert status in (200, 201), body

    # Every panel's query returns data.
    dashboard = json.load(open(os.path.join(ROOT, "deploy/grafana/lanes.json")))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for expr in exprs:
        concrete = expr.replace("$node", ".*").replace("$__rate_interval", "30s")
        wait_for(f"data for the panel query {expr}", lambda: query(concrete), timeout=45)
    print(f"ok: all {len(exprs)} dashboard queries return data")

    # A node gone: Lanes down (its scrape fails) and unreachable (node a stops hearing it).
    children[1].send_signal(signal.SIGKILL)
    firing = lambda: {a["labels"]["alertname"] for a in get(prom + "/api/v1/alerts")[1]["data"]["alerts"]
                      if a["state"] == "firing"}
    wanted = set(names) - {"LanesDatabaseUnreachable"}
    seen = set()
    def all_fired():
        seen.clear()
        seen.update(firing())
        return wanted <= seen
    wait_for(lambda: f"every alert firing (not firing: {sorted(wanted - seen)})", all_fired, timeout=60)
    # The database gone last (it ends what the others need).
    psql(f"ALTER DATABASE {DB} ALLOW_CONNECTIONS false")
    psql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{DB}'")
    wait_for("LanesDatabaseUnreachable firing", lambda: "LanesDatabaseUnreachable" in firing(), timeout=60)
    print(f"ok: all {len(names)} alerts fired: {', '.join(sorted(names))}")


try:
    main()
except BaseException:
    for log in sorted(os.listdir(work)) if os.path.isdir(work) else []:
        if log.endswith(".log"):
            print(f"--- {log} (last lines)", file=sys.stderr)
            print("".join(open(os.path.join(work, log)).readlines()[-15:]), file=sys.stderr)
    raise
finally:
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()
    try:
        psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    except subprocess.CalledProcessError:
        pass
    if os.environ.get("KEEP"):
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
