#!/usr/bin/env python3
"""Real-GPU check of issue 20 (run as root on a GPU host with PyTorch; the `device` tool's
machine): per-process use, energy, and lending, through a release `lanes` reading the cards
through NVML.

1. Two PyTorch processes of two Unix users (ada, bob) on one card ada booked: the SM share
   NVML gives each, sampled each second for 60 s, against the card's utilization; the usage
   report's split of the card's hours between them.
2. Energy over the same 60 s load: the counter's delta against the integral of the power
   readings; the booking's kWh in the report.
3. Lending: ada's idle lending booking runs bo's preemptible PyTorch job; ada starts work on
   the card; the job gets SIGTERM, checkpoints, exits and waits in the queue again; when the
   card is idle again it borrows it again and resumes from its checkpoint.

Usage: device-usage.py LANES_BINARY; everything it measured goes under $OUT (summary.md first).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_lib import OUT, Session as Portal, iso, save, say, summary, wait  # noqa: E402

LANES = os.path.realpath(sys.argv[1])
PY = sys.executable  # PyTorch's python, as root has it
PORT = 3300
URL = f"http://127.0.0.1:{PORT}"
work = tempfile.mkdtemp()
os.chmod(work, 0o1777)
data = os.path.join(work, "data")


for name in ["ada", "bob"]:
    if subprocess.run(["id", name], capture_output=True).returncode:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
for user, unix, admin in [("boss", "nobody", True), ("ada", "ada", False), ("bo", "bob", False)]:
    args = [LANES, "user", "add", "--username", user, "--unix-user", unix, "--password-stdin", "--data-dir", data]
    if admin:
        args.append("--admin")
    subprocess.run(args, input=f"{user} passphrase\n", text=True, check=True, capture_output=True)

LOAD = os.path.join(work, "load.py")
with open(LOAD, "w") as f:
    f.write(
        "import sys, time, torch\n"
        "duty, seconds = float(sys.argv[1]), float(sys.argv[2])\n"
        "x = torch.randn(8192, 8192, device='cuda')\n"
        "end = time.time() + seconds\n"
        "while time.time() < end:\n"
        "    t = time.time()\n"
        "    while time.time() - t < 0.1 * duty:\n"
        "        y = x @ x\n"
        "        torch.cuda.synchronize()\n"
        "    time.sleep(0.1 * (1 - duty))\n"
    )
TRAIN = os.path.join(work, "train.py")
with open(TRAIN, "w") as f:
    f.write(
        "import os, signal, sys, time, torch\n"
        "ckpt = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ckpt-' + str(os.getuid()) + '.pt')\n"
        "stop = False\n"
        "def term(*_):\n"
        "    global stop\n"
        "    stop = True\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "step = 0\n"
        "if os.path.exists(ckpt):\n"
        "    step = torch.load(ckpt)['step']\n"
        "    print(f'resumed from step {step}', flush=True)\n"
        "print('visible cards:', torch.cuda.device_count(), flush=True)\n"
        "w = torch.randn(8192, 8192, device='cuda')\n"
        "while not stop:\n"
        "    w = torch.tanh(w @ w) ; torch.cuda.synchronize(); step += 1\n"
        "torch.save({'step': step}, ckpt)\n"
        "print(f'SIGTERM: checkpointed at step {step}', flush=True)\n"
    )
os.chmod(LOAD, 0o755)
os.chmod(TRAIN, 0o755)

log = open(os.path.join(OUT, "serve.log"), "w")
server = subprocess.Popen(
    [LANES, "serve", "--gpus", "nvml", "--listen", f"127.0.0.1:{PORT}", "--data-dir", data],
    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
)
try:
    wait("the server", 30, lambda: subprocess.run(["curl", "-sf", URL + "/healthz"], capture_output=True).returncode == 0)
    boss, ada, bo = (Portal(URL, u, f"{u} passphrase") for u in ["boss", "ada", "bo"])
    policy = boss.ok("GET", "/api/v1/policy")
    policy.update(idle_threshold_pct=5, idle_window_s=20)
    boss.ok("PUT", "/api/v1/policy", policy)
    qs = boss.ok("GET", "/api/v1/queue/settings")
    qs["lending_grace_s"] = 20
    boss.ok("PUT", "/api/v1/queue/settings", qs)
    gpus = boss.ok("GET", "/api/v1/gpus")
    card = gpus[0]["uuid"]
    say(f"# Issue 20 on a real {gpus[0]['name']} ({card}), {len(gpus)} card(s)")
    say()

    # 1 and 2: two users' processes on one card for 60 s.
    start = datetime.now(timezone.utc).replace(microsecond=0)
    booking = ada.ok("POST", "/api/v1/bookings", {"gpus": [card], "start": iso(start), "end": iso(start + timedelta(minutes=30)), "lend": False})
    env = {"HOME": "/tmp", "CUDA_VISIBLE_DEVICES": card, "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen(["runuser", "-u", user, "--", "env", *[f"{k}={v}" for k, v in env.items()], PY, LOAD, duty, "70"])
        for user, duty in [("ada", "0.3"), ("bob", "1.0")]
    ]
    time.sleep(8)  # both have started their kernels
    samples = []
    t_end = time.time() + 60
    while time.time() < t_end:
        g = next(x for x in boss.ok("GET", "/api/v1/gpus") if x["uuid"] == card)
        samples.append({"at_ms": g["sample"]["at_ms"], "util": g["sample"]["utilization_gpu_pct"],
                        "power_w": g["sample"].get("power_watts"), "energy_mj": g["sample"].get("energy_mj"),
                        "processes": [{"user": p.get("user"), "sm": p.get("sm_pct"), "mem": p.get("mem_pct")} for p in g["processes"]]})
        time.sleep(0.5)
    for p in procs:
        p.wait()
    save("samples.json", samples)
    # One sample per poll (the API repeats a poll's reading until the next).
    by_time = {s["at_ms"]: s for s in samples}
    uniq = [by_time[k] for k in sorted(by_time)]
    two = [s for s in uniq if len([p for p in s["processes"] if p["sm"] is not None]) == 2]
    gaps = [abs(sum(p["sm"] for p in s["processes"]) - s["util"]) for s in two]
    share = lambda user: sum(p["sm"] for s in two for p in s["processes"] if p["user"] == user)
    ada_sm, bob_sm = share("ada"), share("bob")
    say("## Per-process SM share (60 s, a reading a second)")
    say(f"- readings with both processes' samples: {len(two)} of {len(uniq)}")
    if two:
        say(f"- mean SM %: ada {ada_sm / len(two):.1f}, bob {bob_sm / len(two):.1f}; card utilization {sum(s['util'] for s in two) / len(two):.1f} %")
        say(f"- |ada + bob − card|: mean {sum(gaps) / len(gaps):.1f} points, max {max(gaps)} points; within 10 points in {sum(g <= 10 for g in gaps)} of {len(gaps)}")
    # Energy: the counter against the integral of power, over the same readings.
    e = [s for s in uniq if s["energy_mj"] is not None and s["power_w"] is not None]
    if len(e) >= 2:
        counter_j = (e[-1]["energy_mj"] - e[0]["energy_mj"]) / 1000
        integral_j = sum((b["at_ms"] - a["at_ms"]) / 1000 * (a["power_w"] + b["power_w"]) / 2 for a, b in zip(e, e[1:]))
        say()
        say("## Energy over the load")
        say(f"- {(e[-1]['at_ms'] - e[0]['at_ms']) / 1000:.1f} s: counter delta {counter_j:.0f} J, trapezoid integral of power readings {integral_j:.0f} J, difference {100 * (counter_j - integral_j) / integral_j:+.2f} %")
    time.sleep(8)  # the history writer's flush
    report = boss.ok("GET", f"/api/v1/reports/usage?from={iso(start)}&to={iso(datetime.now(timezone.utc) + timedelta(minutes=1))}")
    save("report.json", report)
    say()
    say("## The usage report, from the booking's start")
    say("| user | GPU-hours booked | GPU-hours used | of them card-level | kWh |")
    say("|---|---|---|---|---|")
    for u in report["users"]:
        say(f"| {u['name']} | {u['gpu_hours_booked']:.4f} | {u['gpu_hours_used']:.4f} | {u['gpu_hours_used_card_level']:.4f} | {u['energy_kwh']:.5f} |")
    used = {u["name"]: u["gpu_hours_used"] for u in report["users"]}
    if used.get("ada", 0) + used.get("bo", 0) > 0:
        say(f"- bo's share of the used hours: {100 * used.get('bo', 0) / (used.get('ada', 0) + used.get('bo', 0)):.1f} % (bob's share of SM samples: {100 * bob_sm / max(ada_sm + bob_sm, 1):.1f} %)")
    b = next(x for x in report["bookings"] if x["booking_id"] == booking["id"])
    say(f"- booking #{b['booking_id']}: {b['energy_kwh']:.5f} kWh ({b['energy_kwh'] * 3.6e6:.0f} J)")
    ada.ok("DELETE", f"/api/v1/bookings/{booking['id']}")

    # 3: lending.
    say()
    say("## Lending")
    # After the released booking's end (to the millisecond).
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=2)
    host = ada.ok("POST", "/api/v1/bookings", {"gpus": [card], "start": iso(start), "end": iso(start + timedelta(minutes=30)), "lend": True})
    t0 = time.time()
    wait("the booking to be idle", 90, lambda: ada.ok("GET", f"/api/v1/bookings/{host['id']}").get("idle_since"))
    say(f"- ada's lending booking #{host['id']} found idle after {time.time() - t0:.1f} s (idle window 20 s)")
    job = bo.ok("POST", "/api/v1/queue", {"gpus": 1, "time_limit_s": 1800, "argv": [PY, TRAIN], "cwd": "/tmp", "preemptible": True, "name": "train"})
    t1 = time.time()
    queued = lambda: next(j for j in bo.ok("GET", "/api/v1/queue")["jobs"] if j["id"] == job["id"])
    running = wait("the job to borrow the card", 60, lambda: (lambda j: j if j["state"] == "running" else None)(queued()))
    say(f"- bo's preemptible job #{job['id']} started on it {time.time() - t1:.1f} s after submission, borrowed_from = #{running.get('borrowed_from')}; booking lent_to = #{ada.ok('GET', f'/api/v1/bookings/{host['id']}').get('lent_to')}")
    time.sleep(15)
    t2 = time.time()
    holder = subprocess.Popen(["runuser", "-u", "ada", "--", "env", *[f"{k}={v}" for k, v in env.items()], PY, LOAD, "1.0", "40"])
    back = wait("the job to go back to the queue", 120, lambda: (lambda j: j if j["state"] == "pending" and j.get("requeues") == 1 else None)(queued()), every=0.25)
    say(f"- ada's own PyTorch process started at +0 s; the borrower was back in the queue at +{time.time() - t2:.1f} s (grace 20 s): {back['message']}")
    out = bo.ok("GET", f"/api/v1/jobs/{job['id']}/log")
    text = out["text"] if isinstance(out, dict) else str(out)
    say(f"- its output: {' | '.join(l for l in text.splitlines() if l)}")
    holder.wait()
    t3 = time.time()
    again = wait("the job to borrow the card again", 150, lambda: (lambda j: j if j["state"] == "running" else None)(queued()), every=1)
    say(f"- ada's process ended; the card sat idle again and the job borrowed it again {time.time() - t3:.1f} s later")
    out = wait("the resumed output", 60, lambda: (lambda t: t if "resumed" in t else None)((lambda o: o["text"] if isinstance(o, dict) else str(o))(bo.ok("GET", f"/api/v1/jobs/{job['id']}/log"))))
    say(f"- its output now: {' | '.join(l for l in out.splitlines() if l)}")
    bo.ok("DELETE", f"/api/v1/queue/{job['id']}")
    audit = boss.ok("GET", "/api/v1/audit?limit=200")
    save("audit.json", audit)
    metrics = subprocess.run(["curl", "-s", URL + "/metrics"], capture_output=True, text=True).stdout
    say()
    say("## /metrics")
    for line in metrics.splitlines():
        if line.startswith("lanes_gpu_energy_joules_total") or line.startswith("# TYPE lanes_gpu_energy"):
            say(f"    {line}")
finally:
    os.killpg(server.pid, signal.SIGTERM)
    save("summary.md", "\n".join(summary) + "\n")
