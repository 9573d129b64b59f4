#!/usr/bin/env python3
"""A real SMTP server for the notification tests (aiosmtpd): it asks for a login (AUTH PLAIN or
LOGIN with the user and password given), takes every message and writes it, as received, to
DIR/NNNN.eml (written whole, then renamed, so a reader never sees half a message), with its
subject, recipients and decoded plain-text and HTML bodies beside it in DIR/NNNN.json. It prints
"READY <port>" once it listens on 127.0.0.1.

    smtp_sink.py DIR USER PASSWORD [PORT]
"""
import asyncio
import email
import email.policy
import json
import logging
import warnings
import os
import socket
import sys

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Sink:
    def __init__(self, folder):
        self.folder = folder
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        name = os.path.join(self.folder, f"{self.count:04d}.eml")
        message = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        part = lambda kind: (message.get_body((kind,)) or message).get_content()
        decoded = {
            "to": envelope.rcpt_tos,
            "subject": message["subject"],
            "message_id": message["message-id"],
            "text": part("plain"),
            "html": part("html"),
        }
        side = os.path.join(self.folder, f"{self.count:04d}.json")
        with open(side + ".part", "w") as f:
            json.dump(decoded, f)
        os.rename(side + ".part", side)
        with open(name + ".part", "wb") as f:
            f.write(f"X-Envelope-To: {', '.join(envelope.rcpt_tos)}\r\n".encode())
            f.write(envelope.original_content)
        os.rename(name + ".part", name)
        return "250 OK"


def authenticator(user, password):
    def check(server, session, envelope, mechanism, auth_data):
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == user
            and auth_data.password.decode() == password
        )
        return AuthResult(success=ok, handled=False)

    return check


def main():
    warnings.filterwarnings("ignore")
    logging.getLogger("mail.log").setLevel(logging.ERROR)
    folder, user, password = sys.argv[1:4]
    port = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if port == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    os.makedirs(folder, exist_ok=True)
    controller = Controller(
        Sink(folder),
        hostname="127.0.0.1",
        port=port,
        authenticator=authenticator(user, password),
        auth_required=True,
        auth_require_tls=False,
    )
    controller.start()
    print(f"READY {port}", flush=True)
    try:
        asyncio.new_event_loop().run_forever()
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
