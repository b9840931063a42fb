"""An S3-compatible server for batchlog's tests: moto in server mode, on a free loopback port.

    python s3_server.py READY_FILE [--ignore-if-none-match]

Binds 127.0.0.1 on a port the kernel picks, writes ``http://127.0.0.1:<port>`` to READY_FILE once
it serves, then runs until it is killed (the test that started it stops it by PID). Every request
is logged to stderr, one line each (werkzeug's access log: ``"GET /bucket/key?... HTTP/1.1" 200``):
the request-cost benchmark counts them.

With ``--ignore-if-none-match`` it drops every request's ``If-None-Match`` header before moto sees
it: a store that takes a conditional create and ignores the condition (what batchlog must detect
before it trusts conditional uploads).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable

from moto.server import DomainDispatcherApplication, ThreadedMotoServer, create_backend_app
from werkzeug.serving import make_server


def _ignoring_if_none_match() -> int:
    """Serves moto behind a WSGI step that drops ``If-None-Match``; returns its port."""
    app = DomainDispatcherApplication(create_backend_app)

    def stripped(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        environ.pop("HTTP_IF_NONE_MATCH", None)
        return app(environ, start)  # type: ignore[no-any-return]

    server = make_server("127.0.0.1", 0, stripped, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_address[1])


def main(ready: Path, ignore_if_none_match: bool) -> None:
    if ignore_if_none_match:
        port = _ignoring_if_none_match()
    else:
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        _, port = server.get_host_and_port()
    tmp = ready.with_name(ready.name + ".tmp")
    tmp.write_text(f"http://127.0.0.1:{port}")
    tmp.rename(ready)  # the reader never sees a half-written file
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--ignore-if-none-match" in sys.argv[2:])
