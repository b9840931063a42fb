"""An S3-compatible server for batchlog's tests: moto in server mode, on a free loopback port.

    python s3_server.py READY_FILE

Binds 127.0.0.1 on a port the kernel picks, writes ``http://127.0.0.1:<port>`` to READY_FILE once
it serves, then runs until it is killed (the test that started it stops it by PID). Every request
is logged to stderr, one line each (werkzeug's access log: ``"GET /bucket/key?... HTTP/1.1" 200``):
the request-cost benchmark counts them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from moto.server import ThreadedMotoServer


def main(ready: Path) -> None:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    tmp = ready.with_name(ready.name + ".tmp")
    tmp.write_text(f"http://127.0.0.1:{port}")
    tmp.rename(ready)  # the reader never sees a half-written file
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
