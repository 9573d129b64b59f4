#!/usr/bin/env bash
# Containers (issue 42), on this host as root with rootless Podman (`make test` installs it):
# 1. the time from a job's start (the runner's `started_at`) to its first output line, for the
#    same command (`cat /proc/uptime`, read back as wall time) as a plain job and in a container (a local busybox image, rootless Podman),
#    alternated, RUNS of each, on a simulated card standing for /dev/fuse;
# 2. the poll cost of container attribution: reading the owners of 8 plain and 8 container
#    processes with attribution against without (`lanes-bench attribution`).
# Usage: bench/containers.sh [LANES] [LANES_BENCH]   (default: the dev build of both)
set -eu
LANES=${1:-target/debug/lanes}
BENCH=${2:-target/debug/lanes-bench}
RUNS=${RUNS:-10}
ACCOUNT=lanesbench
IMAGE=localhost/lanes-bench:1
PORT=3997
id "$ACCOUNT" > /dev/null 2>&1 || useradd --create-home --shell /bin/sh "$ACCOUNT"
grep -q "^$ACCOUNT:" /etc/subuid \
  || usermod --add-subuids 300000-365535 --add-subgids 300000-365535 "$ACCOUNT"
if ! runuser -l "$ACCOUNT" -c "podman image exists $IMAGE"; then
  root=$(mktemp -d)
  mkdir "$root/bin"
  cp /bin/busybox "$root/bin/"
  for tool in sh date echo sleep cat; do ln -s busybox "$root/bin/$tool"; done
  tar -C "$root" -cf "$root/rootfs.tar" bin
  chmod 755 "$root"; chmod 644 "$root/rootfs.tar"
  runuser -l "$ACCOUNT" -c "podman import $root/rootfs.tar $IMAGE" > /dev/null
fi
data=$(mktemp -d)
printf 'bench passphrase\n' | "$LANES" user add --username "$ACCOUNT" --unix-user "$ACCOUNT" \
  --password-stdin --data-dir "$data" > /dev/null
"$LANES" serve --gpus sim:2 --sim-background false --sim-device-files /dev/fuse,/dev/net/tun \
  --listen 127.0.0.1:$PORT --data-dir "$data" > "$data/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2> /dev/null; runuser -l $ACCOUNT -c "podman rm --force --time 0 --all" > /dev/null 2>&1; pkill -u $ACCOUNT sleep || true' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null && break; sleep 0.2; done

python3 - "$PORT" "$ACCOUNT" "$IMAGE" "$RUNS" <<'PY'
import json, statistics, sys, time, urllib.request, http.cookiejar, datetime
port, account, image, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
base = f"http://127.0.0.1:{port}/api/v1"
jar = http.cookiejar.CookieJar()
web = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    return json.load(web.open(req))
call("POST", "/auth/login", {"username": account, "password": "bench passphrase"})
gpu = sorted(call("GET", "/gpus"), key=lambda g: g["pci_bus_id"])[0]["uuid"]
now = datetime.datetime.now(datetime.timezone.utc)
booking = call("POST", "/bookings", {"gpus": [gpu], "start": now.isoformat(),
                                     "end": (now + datetime.timedelta(minutes=30)).isoformat()})
def stamp(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
first = {"plain": [], "container": []}
for i in range(runs):
    for kind in ("plain", "container"):
        body = {"booking_id": booking["id"], "argv": ["cat", "/proc/uptime"]}
        if kind == "container":
            body["container"] = {"image": image}
        job = call("POST", "/jobs", body)
        while True:
            job = call("GET", f"/jobs/{job['id']}")
            if job["state"] not in ("queued", "running"):
                break
            time.sleep(0.05)
        text = urllib.request.Request(f"{base}/jobs/{job['id']}/log")
        out = web.open(text).read().decode().strip()
        if job["state"] != "exited" or job.get("exit_code") != 0:
            sys.exit(f"{kind} job failed: {job} {out}")
        # The kernel's uptime, which a container reads alike (10 ms steps), as wall time.
        boot = time.time() - float(open("/proc/uptime").read().split()[0])
        first[kind].append(boot + float(out.split()[0]) - stamp(job["started_at"]))
p = statistics.median(first["plain"]); c = statistics.median(first["container"])
print(f"start to first output line, median of {runs}: plain job {p*1000:.0f} ms, "
      f"container job {c*1000:.0f} ms ({c/p:.1f}x; +{(c-p)*1000:.0f} ms); "
      f"container min {min(first['container'])*1000:.0f} ms, max {max(first['container'])*1000:.0f} ms")
PY

# Podman as Lanes runs it here: runc on a hybrid cgroup v1 host, where crun refuses.
PODMAN="podman --cgroup-manager=cgroupfs"
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || PODMAN="$PODMAN --runtime /usr/bin/runc"
# Attribution: 8 plain processes and 8 in containers, as a poll of busy cards lists them.
pids=()
for _ in $(seq 8); do
  runuser -u "$ACCOUNT" -- sleep 600 &
  pids+=($!)
done
for i in $(seq 8); do
  runuser -l "$ACCOUNT" -c "$PODMAN run -d --rm --name bench-$i $IMAGE sleep 600" > /dev/null
  pids+=("$(runuser -l "$ACCOUNT" -c "podman inspect --format '{{.State.Pid}}' bench-$i")")
done
sleep 1
"$BENCH" attribution --pids "$(IFS=,; echo "${pids[*]}")"
