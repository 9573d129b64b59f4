#!/usr/bin/env python3
"""Real-GPU check of issue 45 (run as root on a GPU host with PyTorch; the `device` tool's
machine): a member's PyTorch training job, submitted as a member types it, borrows another
member's idle booked card, is told to leave when the holder comes back (the notice: SIGUSR1 and
LANES_NOTICE_FILE), checkpoints, is requeued (not failed), borrows the card again when it is
idle again and resumes from its checkpoint with LANES_RESTART_COUNT=1, then finishes. And
`lanes submit --dry-run` answers when a job would start.

- ada holds a lending booking of the card; bo (Unix user bob) trains. bob's login profile puts
  the host's PyTorch on his PATH and names the portal and his token, as a member sets them up;
  he types `lanes submit -g 1 --time 30m --preemptible -- python3 train.py` in ~/train.
- train.py is the loop of docs/preemption.md, with a larger model so that it runs long enough.

Usage: device-preemption.py LANES_BINARY; what it saw goes under $OUT (summary.md first).
"""
import json
import os
import pwd
import shutil
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
VENV_BIN = os.path.dirname(PY)
PORT = 3301
URL = f"http://127.0.0.1:{PORT}"
work = tempfile.mkdtemp()
os.chmod(work, 0o755)
data = os.path.join(work, "data")

TRAIN = '''import os, signal, torch

ckpt = "checkpoint.pt"                       # in the job's working directory
model = torch.nn.Linear(8192, 8192).cuda()
opt = torch.optim.AdamW(model.parameters())
step = 0
if os.path.exists(ckpt):                     # a requeued run resumes here
    state = torch.load(ckpt)
    model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); step = state["step"]
print(f"run {os.environ.get('LANES_RESTART_COUNT', '0')} from step {step} on {torch.cuda.get_device_name()} "
      f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}, uid {os.getuid()})", flush=True)

told = False
def on_notice(signum, frame):                # Lanes' notice: finish this step, then save
    global told
    told = True
signal.signal(signal.SIGUSR1, on_notice)

while step < 3_000:
    x = torch.randn(4096, 8192, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad(); loss.backward(); opt.step(); step += 1
    if told:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                   ckpt + ".part")
        os.replace(ckpt + ".part", ckpt)     # never a half-written checkpoint
        notice = open(os.environ["LANES_NOTICE_FILE"]).read()
        print(f"notice at step {step}: {notice.strip()}", flush=True)
        print(f"checkpointed at step {step}", flush=True)
        raise SystemExit(0)                  # gone before SIGTERM: requeued if preempted
print(f"finished at step {step}", flush=True)
'''

LOAD = '''import sys, time, torch
x = torch.randn(8192, 8192, device="cuda")
end = time.time() + float(sys.argv[1])
while time.time() < end:
    y = x @ x
    torch.cuda.synchronize()
'''


def as_member(user, command):
    """`command` in `user`'s login shell, as they would type it."""
    return subprocess.run(["runuser", "-l", user, "-c", command], capture_output=True, text=True)


for name in ["ada", "bob"]:
    if subprocess.run(["id", name], capture_output=True).returncode:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
for user, unix, admin in [("boss", "nobody", True), ("ada", "ada", False), ("bo", "bob", False)]:
    args = [LANES, "user", "add", "--username", user, "--unix-user", unix, "--password-stdin", "--data-dir", data]
    if admin:
        args.append("--admin")
    subprocess.run(args, input=f"{user} passphrase\n", text=True, check=True, capture_output=True)
shutil.copy(LANES, "/usr/local/bin/lanes")
# The host's PyTorch is root's; members may use it (read and run, nothing more).
path = VENV_BIN
while path != "/":
    os.chmod(path, os.stat(path).st_mode | 0o005)
    path = os.path.dirname(path)
subprocess.run(["chmod", "-R", "o+rX", os.path.dirname(VENV_BIN)], check=True)
bob = pwd.getpwnam("bob")
train_dir = os.path.join(bob.pw_dir, "train")
os.makedirs(train_dir, exist_ok=True)
with open(os.path.join(train_dir, "train.py"), "w") as f:
    f.write(TRAIN)
for p in [train_dir, os.path.join(train_dir, "train.py")]:
    os.chown(p, bob.pw_uid, bob.pw_gid)
load = os.path.join(work, "load.py")
with open(load, "w") as f:
    f.write(LOAD)
os.chmod(load, 0o644)

log = open(os.path.join(OUT, "serve.log"), "w")
server = subprocess.Popen(
    [LANES, "serve", "--gpus", "nvml", "--listen", f"127.0.0.1:{PORT}", "--data-dir", data],
    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
)
try:
    wait("the server", 60, lambda: subprocess.run(["curl", "-sf", URL + "/healthz"], capture_output=True).returncode == 0)
    boss, ada, bo = (Portal(URL, u, f"{u} passphrase") for u in ["boss", "ada", "bo"])
    policy = boss.ok("GET", "/api/v1/policy")
    policy.update(idle_threshold_pct=5, idle_window_s=20)
    boss.ok("PUT", "/api/v1/policy", policy)
    qs = boss.ok("GET", "/api/v1/queue/settings")
    qs["lending_grace_s"] = 30
    boss.ok("PUT", "/api/v1/queue/settings", qs)
    token = bo.ok("POST", "/api/v1/tokens", {"name": "terminal"})
    with open(os.path.join(bob.pw_dir, ".profile"), "a") as f:
        f.write(f"\n# PyTorch and the lab's portal\nexport PATH={VENV_BIN}:$PATH\n"
                f"export LANES_URL={URL}\nexport LANES_TOKEN={token['secret']}\n")
    gpus = boss.ok("GET", "/api/v1/gpus")
    card = gpus[0]["uuid"]
    say(f"# Preemption with notice on a real {gpus[0]['name']} ({card})")
    say()
    which = as_member("bob", "command -v python3; python3 -c 'import torch; print(torch.__version__)'")
    say(f"- bob's login shell: `python3` is {which.stdout.split()[0]}, torch {which.stdout.split()[-1]}")

    start = datetime.now(timezone.utc).replace(microsecond=0)
    host = ada.ok("POST", "/api/v1/bookings", {"gpus": [card], "start": iso(start), "end": iso(start + timedelta(minutes=30)), "lend": True})
    dry = as_member("bob", "cd ~/train && lanes submit --dry-run -g 1 --time 30m")
    save("dry-run-booked.txt", dry.stdout + dry.stderr)
    say(f"- while ada's booking #{host['id']} holds the card, bob's `lanes submit --dry-run -g 1 --time 30m` says:")
    for line in dry.stdout.splitlines():
        say(f"  > {line}")
    t0 = time.time()
    wait("the booking to be idle", 90, lambda: ada.ok("GET", f"/api/v1/bookings/{host['id']}").get("idle_since"))
    say(f"- ada's lending booking found idle after {time.time() - t0:.1f} s (idle window 20 s)")
    typed = "cd ~/train && lanes submit -g 1 --time 30m --preemptible -- python3 train.py"
    submitted = as_member("bob", typed)
    save("submit.txt", submitted.stdout + submitted.stderr)
    said = (submitted.stdout + submitted.stderr).strip()
    say(f"- bob typed `{typed.split('&& ')[1]}`: {said} (status {submitted.returncode})")
    job_id = int(said.split()[1])
    queued = lambda: next(j for j in bo.ok("GET", "/api/v1/queue")["jobs"] if j["id"] == job_id)
    running = wait("the job to borrow the card", 60, lambda: (lambda j: j if j["state"] == "running" else None)(queued()))
    say(f"- job #{job_id} borrowed booking #{running.get('borrowed_from')}'s card")
    logtext = lambda: (lambda o: o["text"] if isinstance(o, dict) else str(o))(bo.ok("GET", f"/api/v1/jobs/{job_id}/log"))
    wait("training to start", 120, lambda: "run 0" in logtext())
    time.sleep(15)
    env = {"HOME": "/tmp", "CUDA_VISIBLE_DEVICES": card, "PATH": f"{VENV_BIN}:/usr/bin:/bin"}
    t2 = time.time()
    holder = subprocess.Popen(["runuser", "-u", "ada", "--", "env", *[f"{k}={v}" for k, v in env.items()], "python3", load, "40"])
    back = wait("the job to go back to the queue", 120, lambda: (lambda j: j if j["state"] == "requeued" and j.get("requeues") == 1 else None)(queued()), every=0.25)
    took = time.time() - t2
    say(f"- ada started her own PyTorch process on the card; job #{job_id} was `{back['state']}` {took:.1f} s later "
        f"(lending grace 30 s: it left on its notice, before SIGTERM): {back['message']}")
    save("requeued.json", back)
    first = logtext()
    for line in first.splitlines():
        say(f"  > {line}")
    holder.wait()
    t3 = time.time()
    wait("the job to borrow the card again", 180, lambda: (lambda j: j if j["state"] == "running" else None)(queued()), every=1)
    say(f"- ada's process ended; the card sat idle again and the job borrowed it again {time.time() - t3:.1f} s later")
    final = wait("the job to finish", 600, lambda: (lambda j: j if j["state"] not in ("running", "pending", "requeued", "queued") else None)(queued()), every=2)
    out = logtext()
    save("job-log.txt", out)
    say(f"- it ended `{final['state']}` after {final.get('requeues')} requeue; its whole output:")
    for line in out.splitlines():
        say(f"  > {line}")
    resumed = [l for l in out.splitlines() if l.startswith("run 1 from step")]
    saved = [l for l in out.splitlines() if l.startswith("checkpointed at step")]
    if resumed and saved:
        lost = int(saved[0].split()[-1]) - int(resumed[0].split()[4])
        say(f"- steps lost to the preemption: {lost} (the checkpoint was step {saved[0].split()[-1]}, the second run began at {resumed[0].split()[4]})")
    job = bo.ok("GET", f"/api/v1/jobs/{job_id}")
    save("job.json", job)
    audit = boss.ok("GET", "/api/v1/audit?limit=200")
    save("audit.json", audit)
finally:
    os.killpg(server.pid, signal.SIGTERM)
    save("summary.md", "\n".join(summary) + "\n")
