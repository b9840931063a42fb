"""An S3-compatible server for batchlog's tests: moto in server mode, on a free loopback port.

    python s3_server.py READY_FILE [--ignore-if-none-match] [--faults FAULTS_FILE]

Binds 127.0.0.1 on a port the kernel picks, writes ``http://127.0.0.1:<port>`` to READY_FILE once
it serves, then runs until it is killed (the test that started it stops it by PID). Every request
is logged to stderr, one line each (werkzeug's access log: ``"GET /bucket/key?... HTTP/1.1" 200``):
the request-cost benchmark counts them.

With ``--ignore-if-none-match`` it drops every request's ``If-None-Match`` header before moto sees
it: a store that takes a conditional create and ignores the condition (what batchlog must detect
before it trusts conditional uploads).

With ``--faults FAULTS_FILE`` a WSGI step in front of moto does what S3 does and moto 5.1 does not:
an ``UploadPartCopy`` whose ``x-amz-copy-source-if-match`` differs from the source's ETag is refused
(412 PreconditionFailed). And it injects the faults FAULTS_FILE names (JSON, read at each request;
absent or ``{}``: none), for the server-side compaction tests:

- ``"refuse_copy_range": true``: every ranged ``UploadPartCopy`` is 501 NotImplemented (a store
  without ranged part copies);
- ``"fail_upload_part": true``: every ``UploadPart`` (a part whose bytes are sent) is 403
  AccessDenied: a failure in the middle of a multipart upload, after its copied parts;
- ``"fail_copy_part": N``: the ``UploadPartCopy`` of part N is 500 InternalError (a store error
  while other parts of the same stretch are being copied);
- ``"rewrite_copy_source": true``: before each ``UploadPartCopy``, its source object is rewritten
  with one byte changed (a previous compact file damaged or replaced under the copy);
- ``"publish_before_complete": true``: before each ``CompleteMultipartUpload``, an object with the
  bytes ``SECOND_WRITER`` is put at its key if there is none (a second writer that published the
  same log file while the upload ran); moto then refuses an ``If-None-Match: *`` completion, as S3
  does;
- every object ``GET`` appends ``bucket/key <bytes sent>`` to ``<FAULTS_FILE>.bytes`` once its body
  is sent (werkzeug logs no size for a streamed body): what a reader read, for the request-cost
  tests;
- ``"lose_answer": REGEX``: the first ``PutObject`` or ``CompleteMultipartUpload`` of each key that
  REGEX matches (``re.search`` on ``bucket/key``) is applied by moto, then answered 500
  InternalError: a store that applied a request and lost its answer (a load balancer's timeout).
  With ``"lose_answer_times": N`` the first N such requests of the key are (each applied, or
  refused, by moto as it would be, then answered 500: the client's retries fail too). Each lost
  answer appends ``bucket/key <moto's status>`` to ``<FAULTS_FILE>.lost``;
- ``"fail_publish": REGEX``: every such publish of a matching key is answered 500 InternalError
  without reaching moto (``bucket/key not-applied`` appended to the same file): a failure whose
  outcome the client cannot know, where nothing was applied.
"""

from __future__ import annotations

import json
import re
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


#: What ``publish_before_complete`` puts: a log file of another writer.
SECOND_WRITER = b'v1\n{"path":"s3a://second/writer","size":1,"batchId":5}'

_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{msg}</Message>'
    "</Error>"
)


def _with_faults(faults: Path) -> int:
    """Serves moto behind a WSGI step that checks copy conditions and injects ``faults``."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    app = DomainDispatcherApplication(create_backend_app)
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]

    def error(start: Callable[..., Any], status: str, code: str) -> Iterable[bytes]:
        body = _ERROR.format(code=code, msg=f"injected by s3_server.py: {code}").encode()
        start(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
        return [body]

    lost: dict[str, int] = {}
    lost_file = faults.with_name(faults.name + ".lost")

    def lose_answer(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes] | None:
        """Applies a matching publish, then answers 500 (once a key); None: not one to lose."""
        query = environ.get("QUERY_STRING", "")
        method = environ["REQUEST_METHOD"]
        publish = (method == "PUT" and "partNumber=" not in query and "uploadId=" not in query) or (
            method == "POST" and "uploadId=" in query
        )
        f = json.loads(faults.read_text() or "{}") if publish and faults.exists() else {}
        if "HTTP_X_AMZ_COPY_SOURCE" in environ:
            return None
        from urllib.parse import unquote

        key = unquote(environ["PATH_INFO"]).lstrip("/")
        if f.get("fail_publish") and re.search(f["fail_publish"], key):
            with open(lost_file, "a") as out:
                out.write(f"{key} not-applied 0\n")
            return error(start, "500 Internal Server Error", "InternalError")
        if not f.get("lose_answer"):
            return None
        if lost.get(key, 0) >= int(f.get("lose_answer_times", 1)):
            return None
        if not re.search(f["lose_answer"], key):
            return None
        lost[key] = lost.get(key, 0) + 1
        answered: list[str] = []
        body = b"".join(app(environ, lambda status, headers, *a: answered.append(status)))
        with open(lost_file, "a") as out:
            out.write(f"{key} {answered[0] if answered else '?'} {len(body)}\n")
        return error(start, "500 Internal Server Error", "InternalError")

    def step(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        query = environ.get("QUERY_STRING", "")
        lost_answer = lose_answer(environ, start)
        if lost_answer is not None:
            return lost_answer
        if environ["REQUEST_METHOD"] == "POST" and "uploadId=" in query:
            f = json.loads(faults.read_text() or "{}") if faults.exists() else {}
            if f.get("publish_before_complete"):
                from urllib.parse import unquote

                bucket, key = unquote(environ["PATH_INFO"]).lstrip("/").split("/", 1)
                if backend.get_object(bucket, key) is None:
                    backend.put_object(bucket, key, SECOND_WRITER)
        if environ["REQUEST_METHOD"] == "PUT" and "partNumber=" in query:
            f = json.loads(faults.read_text() or "{}") if faults.exists() else {}
            source = environ.get("HTTP_X_AMZ_COPY_SOURCE")
            if source is None:
                if f.get("fail_upload_part"):
                    return error(start, "403 Forbidden", "AccessDenied")
            else:
                if f.get("fail_copy_part") and f"partNumber={f['fail_copy_part']}&" in query + "&":
                    return error(start, "500 Internal Server Error", "InternalError")
                if f.get("refuse_copy_range") and "HTTP_X_AMZ_COPY_SOURCE_RANGE" in environ:
                    return error(start, "501 Not Implemented", "NotImplemented")
                from urllib.parse import unquote

                bucket, key = unquote(source.split("?")[0]).lstrip("/").split("/", 1)
                obj = backend.get_object(bucket, key)
                if f.get("rewrite_copy_source") and obj is not None:
                    value = bytearray(obj.value)
                    value[-1] ^= 0x01
                    backend.put_object(bucket, key, bytes(value))
                    obj = backend.get_object(bucket, key)
                want = environ.get("HTTP_X_AMZ_COPY_SOURCE_IF_MATCH")
                if want and obj is not None and want.strip('"') != obj.etag.strip('"'):
                    return error(start, "412 Precondition Failed", "PreconditionFailed")
        body: Iterable[bytes] = app(environ, start)
        if environ["REQUEST_METHOD"] == "GET" and not query:
            return counted(environ["PATH_INFO"], body)
        return body

    read_file = faults.with_name(faults.name + ".bytes")
    read_lock = threading.Lock()

    def counted(path: str, body: Iterable[bytes]) -> Iterable[bytes]:
        sent = 0
        try:
            for chunk in body:
                sent += len(chunk)
                yield chunk
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
            with read_lock, open(read_file, "a") as out:
                out.write(f"{path.lstrip('/')} {sent}\n")

    server = make_server("127.0.0.1", 0, step, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_address[1])


def main(ready: Path, ignore_if_none_match: bool, faults: Path | None = None) -> None:
    if faults is not None:
        port = _with_faults(faults)
    elif ignore_if_none_match:
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
    args = sys.argv[2:]
    faults = Path(args[args.index("--faults") + 1]) if "--faults" in args else None
    main(Path(sys.argv[1]), "--ignore-if-none-match" in args, faults)
