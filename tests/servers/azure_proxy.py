"""A fault step in front of Azurite's blob service, for batchlog's tests of sinks on ``abfs://``.

    python azure_proxy.py UPSTREAM READY_FILE FAULTS_FILE -- SERVER_COMMAND...

Starts SERVER_COMMAND (Azurite serving at UPSTREAM) as its child, in its own process group, binds
127.0.0.1 on a port the kernel picks, writes ``127.0.0.1:<port>`` to READY_FILE once both serve,
then forwards every request to UPSTREAM until it is killed (the test that started it stops its
process group by PID: both). Every request is logged to stderr as werkzeug logs moto's
(``"METHOD /path?query HTTP/1.1" STATUS``). The ``Host`` header is forwarded as it came: Azurite
serves a Put Block From URL only from a source on the host the request was sent to.

It injects the faults FAULTS_FILE names (JSON, read at each request; ``{}``: none), each on a
request to a blob (``container/name``) a regex matches (``re.search``), of two kinds:

- a request that *publishes* a blob: a Put Block List (``comp=blocklist``), a Copy Blob (a
  rename, on ABFS's Blob API) or a Put Blob;
- a request that *copies a block* from another blob (Put Block From URL).

- ``"lose_answer": REGEX``: the first publish of each matching blob is forwarded (Azurite applies
  it, or refuses it, as it would), then answered 503: a store that applied a request and lost its
  answer. With ``"lose_answer_times": N`` the first N are.
- ``"fail_publish": REGEX``: every matching publish is answered 503 without being forwarded.
- ``"fail_copy": REGEX``: every block copy into a matching blob is answered 503, not forwarded.
- ``"stall_publish": REGEX``: a matching publish is never answered (it is held until its client is
  gone: a driver killed while it waits); with ``"stall_apply": true`` it is forwarded first
  (applied), else not. Noted as ``stalled:<upstream status or not-applied>``.

Each fault appends ``container/name <upstream status or not-applied>`` to ``<FAULTS_FILE>.lost``;
a lost answer is logged with status ``503/lost:<upstream status>``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))  # a script, or imported as servers.*
from relay import Relay, answers, publish_ready  # noqa: E402

#: Azure's answer to a request it cannot serve now.
_BUSY = (
    b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
    b"<Message>injected by azure_proxy.py</Message></Error>"
)
_BUSY_HEADERS = [("Content-Type", "application/xml"), ("x-ms-error-code", "ServerBusy")]


def kind_of(method: str, query: dict[str, list[str]], headers: dict[str, str]) -> str | None:
    """``publish``, ``copy`` (a block from another blob) or None."""
    if method != "PUT":
        return None
    comp = query.get("comp", [""])[0]
    if comp == "blocklist":
        return "publish"
    if comp == "block":
        return "copy" if "x-ms-copy-source" in headers else None
    if comp == "" and ("x-ms-copy-source" in headers or "x-ms-blob-type" in headers):
        return "publish"
    return None


def serve(upstream: str, ready: Path, faults: Path, command: list[str]) -> None:
    up = urlparse(upstream)
    child = subprocess.Popen(command)
    deadline = time.monotonic() + 120
    while not answers(f"{upstream}/devstoreaccount1?comp=list", any_status=True):
        if child.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"azure_proxy.py: {command[0]} did not start")
        time.sleep(0.1)
    lost: dict[str, int] = {}
    lock = threading.Lock()
    lost_file = faults.with_name(faults.name + ".lost")

    class Step(Relay):
        upstream_host = up.hostname or "127.0.0.1"
        upstream_port = up.port or 80
        keep_host = True

        def handle_one(self) -> None:
            body = self.body()
            url = urlparse(self.path)
            query = parse_qs(url.query)
            headers = {k.lower(): v for k, v in self.headers.items()}
            kind = kind_of(self.command, query, headers)
            parts = url.path.split("/", 2)  # "", account, container/name
            name = unquote(parts[2]) if kind and len(parts) == 3 else None
            f = json.loads(faults.read_text() or "{}") if name and faults.exists() else {}
            status: int | str
            stall = f.get("stall_publish") if kind == "publish" else None
            if name and stall and re.search(stall, name):
                what = str(self.forward(body)[0]) if f.get("stall_apply") else "not-applied"
                self.note(name, f"stalled:{what}")
                self.hold(f"stalled:{what}")
                return
            fail = f.get("fail_publish") if kind == "publish" else f.get("fail_copy")
            if name and fail and re.search(fail, name):
                self.note(name, "not-applied")
                status, answer = 503, (503, _BUSY_HEADERS, _BUSY)
            else:
                answer = self.forward(body)
                status = answer[0]
                lose = f.get("lose_answer") if kind == "publish" else None
                if name and lose and re.search(lose, name):
                    with lock:
                        now = lost.get(name, 0) < int(f.get("lose_answer_times", 1))
                        lost[name] = lost.get(name, 0) + now
                    if now:
                        self.note(name, str(answer[0]))
                        status = f"503/lost:{answer[0]}"
                        answer = (503, _BUSY_HEADERS, _BUSY)
            print(f'"{self.command} {self.path} HTTP/1.1" {status}', file=sys.stderr, flush=True)
            self.answer(*answer)

        def note(self, name: str, what: str) -> None:
            with lock, open(lost_file, "a") as out:
                out.write(f"{name} {what}\n")

    publish_ready(Step, ready, scheme=False)


if __name__ == "__main__":
    sep = sys.argv.index("--")
    serve(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[sep + 1 :])
