"""What the Python device checks (device-usage.py, device-preemption.py) share: a portal session
over HTTP, waiting for a condition, and a summary written under $OUT as it is said."""
import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from datetime import timezone

OUT = os.environ.get("OUT", tempfile.mkdtemp())
summary = []


def say(line=""):
    print(line, flush=True)
    summary.append(line)


def save(name, value):
    with open(os.path.join(OUT, name), "w") as f:
        f.write(value if isinstance(value, str) else json.dumps(value, indent=1, default=str))


class Session:
    """A member logged in to the portal at `url`, with their cookie."""

    def __init__(self, url, user, password, timeout=20):
        self.url, self.timeout, self.cookie = url, timeout, None
        _, _, headers = self.call("POST", "/api/v1/auth/login", {"username": user, "password": password})
        self.cookie = headers["set-cookie"].split(";")[0]

    def call(self, method, path, body=None):
        req = urllib.request.Request(self.url + path, method=method)
        req.add_header("origin", self.url)
        if self.cookie:
            req.add_header("cookie", self.cookie)
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, payload, timeout=self.timeout) as r:
                text = r.read().decode()
                return r.status, (json.loads(text) if text and text[0] in "[{" else text), r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), e.headers

    def ok(self, method, path, body=None):
        status, answer, _ = self.call(method, path, body)
        if status >= 300:
            raise SystemExit(f"{method} {path}: {status} {answer}")
        return answer


def iso(t):
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def wait(what, seconds, probe, every=0.5):
    end = time.time() + seconds
    while time.time() < end:
        found = probe()
        if found:
            return found
        time.sleep(every)
    raise SystemExit(f"timed out waiting for {what}")
