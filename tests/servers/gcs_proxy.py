"""A fault step in front of fake-gcs-server, for batchlog's tests of sinks on ``gs://``.

    python gcs_proxy.py UPSTREAM READY_FILE FAULTS_FILE -- SERVER_COMMAND...

Starts SERVER_COMMAND (fake-gcs-server serving at UPSTREAM) as its child, in its own process
group, binds 127.0.0.1 on a port the kernel picks, writes ``http://127.0.0.1:<port>`` to
READY_FILE once both serve, then forwards every request to UPSTREAM until it is killed (the test
that started it stops its process group by PID: both). Every request is logged to stderr, one
line each, as werkzeug logs moto's (``"METHOD /path?query HTTP/1.1" STATUS``). An upload's
``Location`` (a resumable session) is rewritten to this step, so every request of an upload
passes here.

It refuses (412) a ``compose`` with ``ifGenerationMatch=0`` onto an object that exists, as GCS
does: fake-gcs-server ignores conditions on ``compose``. And it injects the faults FAULTS_FILE
names (JSON, read at each request; ``{}``: none), each on the request that *publishes* an object
(a ``multipart`` or ``media`` upload, the last ``PUT`` of a resumable one, a ``compose``, a
``copyTo``/``rewriteTo``) whose ``bucket/object`` a regex matches (``re.search``):

- ``"lose_answer": REGEX``: the first such request of each object is forwarded (fake-gcs-server
  applies it, or refuses it, as it would), then answered 503: a store that applied a request and
  lost its answer (a load balancer's timeout). With ``"lose_answer_times": N`` the first N are.
- ``"fail_publish": REGEX``: every such request is answered 503 without being forwarded: a
  failure whose outcome the client cannot know, where nothing was applied.
  ``"fail_compose": REGEX``: the same, for composes only.
- ``"publish_before_compose": REGEX``: before a compose of a matching object, :data:`SECOND_WRITER`
  is uploaded there if nothing is: a second writer that published the same log file first.
- ``"stall_compose": REGEX``: a compose of a matching object is never answered (it is held until
  its client is gone: a driver killed while it waits); with ``"stall_apply": true`` it is
  forwarded first (applied), else not. Noted as ``stalled:<upstream status or not-applied>``.

Each fault appends ``bucket/object <upstream status or not-applied>`` to ``<FAULTS_FILE>.lost``;
a lost answer is logged with status ``503/lost:<upstream status>``.
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode, urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))  # a script, or imported as servers.*
from relay import Answer, Relay, answers, publish_ready  # noqa: E402

#: A JSON API error as GCS answers it.
_UNAVAILABLE = json.dumps(
    {"error": {"code": 503, "message": "injected by gcs_proxy.py: backendError"}}
).encode()

#: What ``publish_before_compose`` puts: a log file of another writer.
SECOND_WRITER = b'v1\n{"path":"gs://second/writer","size":1,"batchId":5}'

#: GCS's refusal of a request whose precondition does not hold.
_PRECONDITION = json.dumps(
    {
        "error": {
            "code": 412,
            "message": "At least one of the pre-conditions you specified did not hold.",
        }
    }
).encode()


def serve(upstream: str, ready: Path, faults: Path, command: list[str]) -> None:
    up = urlparse(upstream)
    child = subprocess.Popen(command)
    deadline = time.monotonic() + 60
    while not answers(f"{upstream}/storage/v1/b"):
        if child.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"gcs_proxy.py: {command[0]} did not start")
        time.sleep(0.1)
    lost: dict[str, int] = {}
    sessions: dict[str, str] = {}  # resumable upload id -> bucket/object
    lock, compose_lock = threading.Lock(), threading.Lock()
    lost_file = faults.with_name(faults.name + ".lost")

    def target(method: str, path: str, query: dict[str, list[str]], body: bytes) -> str | None:
        """``bucket/object`` the request publishes, or None if it publishes nothing."""
        m = re.match(r"^/upload/storage/v1/b/([^/]+)/o$", path)
        if m and method in ("POST", "PUT"):
            kind = query.get("uploadType", [""])[0]
            if kind == "resumable" and "upload_id" in query:
                with lock:
                    return sessions.get(query["upload_id"][0])
            if kind in ("multipart", "media"):
                name = query.get("name", [None])[0] or _multipart_name(body)
                return f"{m.group(1)}/{name}" if name else None
            return None
        m = re.match(r"^/storage/v1/b/([^/]+)/o/(.+)/compose$", path)
        if m and method == "POST":
            return f"{m.group(1)}/{unquote(m.group(2))}"
        m = re.match(r"^/storage/v1/b/[^/]+/o/.+/(?:copyTo|rewriteTo)/b/([^/]+)/o/(.+)$", path)
        if m and method == "POST":
            return f"{m.group(1)}/{unquote(m.group(2))}"
        return None

    class Step(Relay):
        upstream_host = up.hostname or "127.0.0.1"
        upstream_port = up.port or 80

        def _forward_checked(self, body: bytes, path: str, query: dict[str, list[str]]) -> Answer:
            """Forwards the request; a ``compose`` with ``ifGenerationMatch=0`` onto an object
            that exists is refused (412) here, as GCS refuses it: fake-gcs-server ignores the
            condition (v1.56.1 composes with no conditions). Composes run one at a time, so the
            check and the compose are one step for them."""
            m = re.match(r"^/storage/v1/b/([^/]+)/o/(.+)/compose$", path)
            if not (m and self.command == "POST" and query.get("ifGenerationMatch") == ["0"]):
                return self.forward(body)
            with compose_lock:
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
                try:
                    conn.request("GET", f"/storage/v1/b/{m.group(1)}/o/{m.group(2)}")
                    exists = conn.getresponse().status == 200
                finally:
                    conn.close()
                if exists:
                    return 412, [("Content-Type", "application/json")], _PRECONDITION
                return self.forward(body)

        def handle_one(self) -> None:
            body = self.body()
            url = urlparse(self.path)
            query = parse_qs(url.query)
            name = target(self.command, url.path, query, body)
            f = json.loads(faults.read_text() or "{}") if name and faults.exists() else {}
            status: int | str
            compose = url.path.endswith("/compose")
            fail = f.get("fail_publish") or (f.get("fail_compose") if compose else None)
            if compose and name and f.get("publish_before_compose"):
                if re.search(f["publish_before_compose"], name):
                    self._second_writer(name)
            stall = f.get("stall_compose") if compose else None
            if stall and name and re.search(stall, name):
                what = "not-applied"
                if f.get("stall_apply"):
                    what = str(self._forward_checked(body, url.path, query)[0])
                self._note(name, f"stalled:{what}")
                self.hold(f"stalled:{what}")
                return
            if fail and name and re.search(fail, name):
                self._note(name, "not-applied")
                status, answer = 503, (503, [("Content-Type", "application/json")], _UNAVAILABLE)
            else:
                answer = self._forward_checked(body, url.path, query)
                status = answer[0]
                if answer[0] in (200, 201) and "uploadType=resumable" in url.query:
                    self._remember_session(answer[1], url.path, body)
                if name and f.get("lose_answer") and re.search(f["lose_answer"], name):
                    with lock:
                        lose = lost.get(name, 0) < int(f.get("lose_answer_times", 1))
                        lost[name] = lost.get(name, 0) + lose
                    if lose:
                        self._note(name, str(answer[0]))
                        status = f"503/lost:{answer[0]}"
                        answer = (503, [("Content-Type", "application/json")], _UNAVAILABLE)
            print(f'"{self.command} {self.path} HTTP/1.1" {status}', file=sys.stderr, flush=True)
            self.answer(*answer)

        def _second_writer(self, name: str) -> None:
            """Puts :data:`SECOND_WRITER` at ``bucket/object`` (a media upload upstream) if there
            is nothing there: another writer's log file, published first."""
            bucket, obj = name.split("/", 1)
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
            try:
                query = urlencode({"uploadType": "media", "name": obj, "ifGenerationMatch": "0"})
                conn.request("POST", f"/upload/storage/v1/b/{bucket}/o?{query}", SECOND_WRITER)
                conn.getresponse().read()
            finally:
                conn.close()

        def _remember_session(self, headers: list[tuple[str, str]], path: str, body: bytes) -> None:
            """A resumable upload's start: its session's id, for the object it will publish."""
            location = dict((k.lower(), v) for k, v in headers).get("location")
            m = re.match(r"^/upload/storage/v1/b/([^/]+)/o$", path)
            if not location or not m:
                return
            q = parse_qs(urlparse(location).query)
            start = parse_qs(urlparse(self.path).query)
            name = start.get("name", [None])[0] or _multipart_name(body)
            if "upload_id" in q and name:
                with lock:
                    sessions[q["upload_id"][0]] = f"{m.group(1)}/{name}"

        def _note(self, name: str, what: str) -> None:
            with lock, open(lost_file, "a") as out:
                out.write(f"{name} {what}\n")

    publish_ready(Step, ready)


def _multipart_name(body: bytes) -> str | None:
    """The object's name in a ``multipart`` upload's JSON part."""
    m = re.search(rb'"name"\s*:\s*"((?:[^"\\]|\\.)*)"', body[:65536])
    return json.loads(b'"' + m.group(1) + b'"') if m else None


if __name__ == "__main__":
    sep = sys.argv.index("--")
    serve(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[sep + 1 :])
