"""What the fault steps in front of a store's test server share (``gcs_proxy.py``,
``azure_proxy.py``): a handler that reads a request whole, forwards it, and answers; the check
that the server answers; and the ready file a test waits for."""

from __future__ import annotations

import http.client
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: Headers that describe one hop's connection, not the message.
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer"}

Answer = tuple[int, list[tuple[str, str]], bytes]


class Relay(BaseHTTPRequestHandler):
    """Forwards a request to ``upstream_host:upstream_port``; a subclass's ``handle_one`` decides
    what to forward and what to answer. ``keep_host``: forward the ``Host`` header as it came (or
    set it to the upstream's)."""

    protocol_version = "HTTP/1.1"
    upstream_host = "127.0.0.1"
    upstream_port = 80
    keep_host = False

    def log_message(self, fmt: str, *args: object) -> None:  # the request log: stderr
        pass

    def handle_one(self) -> None:
        raise NotImplementedError

    def body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        """Answers ``status``, ``headers`` and ``body``; to a HEAD, the upstream's
        ``Content-Length`` (the length of what a GET would send: a blob's size)."""
        self.send_response(status)
        length = str(len(body))
        for k, v in headers:
            if k.lower() == "content-length" and self.command == "HEAD":
                length = v
            elif k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def forward(self, body: bytes) -> Answer:
        """The upstream's answer to this request; its headers naming the upstream name this
        step instead (an upload session's ``Location``)."""
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=120)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            upstream = f"{self.upstream_host}:{self.upstream_port}"
            if not self.keep_host:
                headers["Host"] = upstream
            conn.request(self.command, self.path, body=body or None, headers=headers)
            r = conn.getresponse()
            data = r.read()
            me = f"{self.server.server_address[0]}:{self.server.server_address[1]}"
            out = [(k, v.replace(f"http://{upstream}", f"http://{me}")) for k, v in r.getheaders()]
            return r.status, out, data
        finally:
            conn.close()

    def hold(self, status: str) -> None:
        """Logs this request with ``status`` and never answers it: waits until its client is gone
        (a killed driver), then closes the connection."""
        print(f'"{self.command} {self.path} HTTP/1.1" {status}', file=sys.stderr, flush=True)
        self.close_connection = True
        self.connection.settimeout(1.0)
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            try:
                if self.connection.recv(1) == b"":
                    return  # the client closed its end
            except TimeoutError:
                continue
            except OSError:
                return

    def _handle(self) -> None:
        self.handle_one()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle


def answers(url: str, any_status: bool = False) -> bool:
    """Whether the server at ``url`` answers (200; with ``any_status``, any HTTP status)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except urllib.error.HTTPError:
        return any_status
    except OSError:
        return False


def publish_ready(handler: type[Relay], ready: Path, scheme: bool = True) -> None:
    """Serves ``handler`` on a free loopback port, writes its address to ``ready`` (with
    ``http://`` if ``scheme``) once it serves, then serves until killed."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = ready.with_name(ready.name + ".tmp")
    address = f"127.0.0.1:{server.server_address[1]}"
    tmp.write_text(f"http://{address}" if scheme else address)
    tmp.rename(ready)  # the reader never sees a half-written file
    while True:
        time.sleep(3600)
