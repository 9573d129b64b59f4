#!/usr/bin/env bash
# Real-GPU check of container jobs (issue 42), run through the `device` tool as root on a host
# with no container runtime of its own: Debian 12's rootless Podman (4.3.1, crun, conmon,
# newuidmap) is carried in DEVRUN/pod.tgz with the libraries it links, installed under
# /usr/local, and an image is made from the host's own PyTorch (/opt/torch/.venv and the system
# files it needs). `STAGE=probe` only installs Podman and runs a busybox-free check; the full run
# serves Lanes on the real card, runs a PyTorch container job on a booked card as a member, and
# records what the job saw and how the card's process was attributed. Outputs under OUT.
set -u
# shellcheck source=bench/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
enter_devrun 3996
STAGE=${STAGE:-full}
# The carried build may come compressed (the carry limit).
[ -f lanes.gz ] && gunzip -f lanes.gz && chmod 755 lanes
ACCOUNT=lanesctr
POD=/usr/local/lib/lanes-pod

{ uname -r; stat -fc %T /sys/fs/cgroup; cat /etc/os-release | head -2; df -h / | tail -1
  du -sh /opt/torch/.venv 2>&1; readlink -f /opt/torch/.venv/bin/python; ls -la /usr/bin/newuidmap 2>&1
  for l in libaudit.so.1 libselinux.so.1 libcap-ng.so.0 libpcre2-8.so.0 libsubid.so.4; do
    ls /lib/x86_64-linux-gnu/$l 2>&1; done; } > "$OUT/containers-host.txt" 2>&1

# Podman, as Debian packages it, under /usr/local: wrappers give each program its libraries.
mkdir -p $POD && tar -xzf pod.tgz -C $POD
mkdir -p /etc/containers /usr/share/containers
cp -rn $POD/etc/containers/* /etc/containers/
cp -rn $POD/share/* /usr/share/containers/ 2>/dev/null
for tool in podman conmon crun catatonit; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib exec %s/bin/%s "$@"\n' $POD $POD $tool > /usr/local/bin/$tool
  chmod 755 /usr/local/bin/$tool
done
# newuidmap and newgidmap are setuid root (the loader ignores LD_LIBRARY_PATH for them): the
# host's own when it has them, else Debian's, which link only libraries every host has.
for map in newuidmap newgidmap; do
  [ -x /usr/bin/$map ] || { install -m 4755 $POD/bin/$map /usr/bin/$map; echo "installed $map"; }
done >> "$OUT/containers-host.txt"
grep -q lanes-pod /etc/containers/containers.conf 2> /dev/null || cat >> /etc/containers/containers.conf <<CONF
# lanes-pod: the carried Podman's helpers
[engine]
conmon_path = ["/usr/local/bin/conmon"]
[engine.runtimes]
crun = ["/usr/local/bin/crun"]
CONF
id $ACCOUNT > /dev/null 2>&1 || useradd --create-home --shell /bin/bash $ACCOUNT
grep -q "^$ACCOUNT:" /etc/subuid || usermod --add-subuids 300000-365535 --add-subgids 300000-365535 $ACCOUNT
# Rootless overlay where the kernel allows it (vfs would copy the whole image per container),
# chosen before the store is first made.
runuser -l $ACCOUNT -c 'podman system reset --force' > /dev/null 2>&1
runuser -l $ACCOUNT -c 'mkdir -p ~/.config/containers && printf "[storage]\ndriver = \"overlay\"\n" > ~/.config/containers/storage.conf'
runuser -l $ACCOUNT -c 'podman info --format "{{.Host.OCIRuntime.Name}} {{.Host.CgroupsVersion}} {{.Store.GraphDriverName}} rootless={{.Host.Security.Rootless}}"' \
  > "$OUT/containers-podman-info.txt" 2>&1
# A busybox image (carried), to prove a rootless container runs here with one card's files.
tiny=$(mktemp -d); mkdir -p $tiny/bin; cp $POD/bin/busybox $tiny/bin/
for t in sh ls id cat; do ln -s busybox $tiny/bin/$t; done
tar -C $tiny -cf $tiny/rootfs.tar bin; chmod 755 $tiny; chmod 644 $tiny/rootfs.tar
runuser -l $ACCOUNT -c "podman import $tiny/rootfs.tar localhost/busybox:carried" > /dev/null 2>> "$OUT/containers-podman-info.txt"
runuser -l $ACCOUNT -c "podman run --rm --pull=never --userns=keep-id --cgroups=disabled --cgroup-manager=cgroupfs \
  --network=host --device /dev/nvidia0 --device /dev/nvidiactl localhost/busybox:carried sh -c 'id; ls /dev'" \
  > "$OUT/containers-busybox-run.txt" 2>&1
echo "exit $?" >> "$OUT/containers-busybox-run.txt"
echo "probe done" >> "$OUT/containers-host.txt"
[ "$STAGE" = probe ] && exit 0

# The image: the host's Python and PyTorch, without the driver's libraries (Lanes mounts the
# host's at /usr/local/nvidia/lib64, where CUDA images look).
start=$(date +%s)
tar -C / -c --exclude='usr/lib/x86_64-linux-gnu/libcuda*' --exclude='usr/lib/x86_64-linux-gnu/libnvidia*' \
  bin lib lib64 sbin usr/lib64 usr/bin/python3.12 usr/bin/python3 usr/lib/python3.12 usr/lib/x86_64-linux-gnu \
  etc/ld.so.cache opt/torch 2> /dev/null \
  | runuser -l $ACCOUNT -c "podman import --change 'ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib64' - localhost/torch:host" \
  > "$OUT/containers-image.txt" 2>&1
echo "image made in $(( $(date +%s) - start )) s" >> "$OUT/containers-image.txt"
runuser -l $ACCOUNT -c 'podman images' >> "$OUT/containers-image.txt" 2>&1

data=$(mktemp -d)
chmod 755 "$data"
printf 'ctr passphrase\n' | ./lanes user add --username $ACCOUNT --unix-user $ACCOUNT \
  --password-stdin --data-dir "$data" > /dev/null
./lanes serve --gpus nvml --listen 127.0.0.1:$PORT --data-dir "$data" --job-grace 5s \
  > "$OUT/containers-serve.out" 2> "$OUT/containers-serve.err" &
SERVER=$!
for _ in $(seq 50); do curl -sf $URL/healthz > /dev/null && break; sleep 0.2; done
./lanes doctor > "$OUT/containers-doctor.txt" 2>&1
curl -s -c "$data/c" -H 'content-type: application/json' \
  -d "{\"username\":\"$ACCOUNT\",\"password\":\"ctr passphrase\"}" $URL/api/v1/auth/login > /dev/null
PY=/opt/torch/.venv/bin/python3
GPU0=$(curl -s -b "$data/c" $URL/api/v1/gpus | $PY -c 'import json,sys; print(json.load(sys.stdin)[0]["uuid"])')
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
END=$(date -u -d "+150 sec" +%Y-%m-%dT%H:%M:%SZ)
curl -s -b "$data/c" -H 'content-type: application/json' \
  -d "{\"gpus\":[\"$GPU0\"],\"start\":\"$START\",\"end\":\"$END\"}" $URL/api/v1/bookings > "$OUT/containers-booking.json"
BOOKING=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/containers-booking.json")
cat > "$data/job.json" <<JSON
{"booking_id": $BOOKING, "name": "torch-in-podman", "argv": ["/opt/torch/.venv/bin/python3", "-u", "-c",
 "import os, time, torch\nprint('CUDA_VISIBLE_DEVICES', os.environ.get('CUDA_VISIBLE_DEVICES'))\nprint('uid', os.getuid(), 'in', open('/proc/1/cgroup').read().strip())\nprint('device_count', torch.cuda.device_count())\nprint('uuid', torch.cuda.get_device_properties(0).uuid)\nprint('/dev', sorted(d for d in os.listdir('/dev') if d.startswith('nvidia')))\nx = torch.randn(8192, 8192, device='cuda')\nend = time.time() + 40\nn = 0\nwhile time.time() < end:\n    y = x @ x\n    n += 1\ntorch.cuda.synchronize()\nprint('matmuls', n, 'in 40 s')\n"],
 "container": {"image": "localhost/torch:host", "options": ["--shm-size=1g"]}}
JSON
curl -s -b "$data/c" -H 'content-type: application/json' -d @"$data/job.json" $URL/api/v1/jobs > "$OUT/containers-job-submitted.json"
JOB=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/containers-job-submitted.json")
sleep 25
curl -s -b "$data/c" $URL/api/v1/gpus > "$OUT/containers-gpus.json"
curl -s -b "$data/c" $URL/api/v1/jobs/$JOB > "$OUT/containers-job-running.json"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/containers-nvidia-smi-apps.csv"
for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do
  echo "pid $pid: $(ps -o user=,comm= -p $pid) cgroup $(cat /proc/$pid/cgroup)"; done > "$OUT/containers-process-cgroups.txt"
for _ in $(seq 60); do
  state=$(curl -s -b "$data/c" $URL/api/v1/jobs/$JOB | $PY -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  [ "$state" = running ] || [ "$state" = queued ] || break
  sleep 2
done
sleep 8
curl -s -b "$data/c" $URL/api/v1/jobs/$JOB > "$OUT/containers-job-ended.json"
curl -s -b "$data/c" "$URL/api/v1/jobs/$JOB/log" > "$OUT/containers-job-stdout.txt"
curl -s -b "$data/c" "$URL/api/v1/jobs/$JOB/log?stream=stderr" > "$OUT/containers-job-stderr.txt"
{ echo "podman ps --all:"; runuser -l $ACCOUNT -c 'podman ps --all'; echo "job cgroups left:"; ls /sys/fs/cgroup/lanes/ 2>&1
  echo "processes of $ACCOUNT:"; ps -o pid,comm -u $ACCOUNT; } > "$OUT/containers-after.txt" 2>&1
kill -TERM $SERVER; wait $SERVER
echo done >> "$OUT/containers-after.txt"
