"""Runs one cell in a new kernel of a Lanes notebook session, through the portal, as a browser
would: POST /sessions/ID/api/kernels, then an execute_request over the kernel's websocket at
/sessions/ID/api/kernels/K/channels. Prints what the cell printed and how long it took.
Usage: python3 notebook-cell.py PORTAL_URL TOKEN SESSION_ID CODE_FILE
(needs tornado, which Jupyter Server brings)."""
import json, sys, time, urllib.request
from tornado import httpclient, ioloop, websocket

portal, token, session, code_file = sys.argv[1:5]
code = open(code_file).read()
base = f"{portal.rstrip('/')}/sessions/{session}"
auth = {"Authorization": f"Bearer {token}"}
made = urllib.request.urlopen(urllib.request.Request(
    f"{base}/api/kernels", data=b'{"name":"python3"}', method="POST",
    headers={**auth, "Content-Type": "application/json"}))
kernel = json.load(made)["id"]


async def main():
    request = httpclient.HTTPRequest(
        f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel}/channels", headers=auth)
    socket = await websocket.websocket_connect(request)
    start = time.time()
    socket.write_message(json.dumps({
        "header": {"msg_id": "cell", "username": "device", "session": "device",
                   "msg_type": "execute_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
    while True:
        text = await socket.read_message()
        if text is None:
            print("the websocket closed"); return 1
        m = json.loads(text)
        if m["parent_header"].get("msg_id") != "cell":
            continue
        kind = m["header"]["msg_type"]
        if kind == "stream":
            sys.stdout.write(m["content"]["text"])
        elif kind == "error":
            print("error:", m["content"]["ename"], m["content"]["evalue"]); return 1
        elif kind == "status" and m["content"]["execution_state"] == "idle":
            print(f"(cell ran in {time.time() - start:.2f} s, through {base}/)")
            return 0

sys.exit(ioloop.IOLoop.current().run_sync(main))
