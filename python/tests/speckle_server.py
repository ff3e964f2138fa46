"""A Speckle server's object endpoints on loopback, for specklepy's ``ServerTransport``:
``/api/diff`` and ``/objects/{stream}`` (what a send uploads), ``/objects/{stream}/{id}/single``
and ``/api/getobjects`` (what a receive downloads), as speckle-server answers them. Objects
are kept in memory by id; requests are counted; ``stop()`` takes the server down."""

from __future__ import annotations

import email.parser
import email.policy
import gzip
import json
import threading
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict


def _objects_of(text: str):
    """The (id, JSON text) of each object of an uploaded JSON array, the text as sent."""
    decoder = json.JSONDecoder()
    at = text.index("[") + 1
    while True:
        while text[at] in " \t\r\n,":
            at += 1
        if text[at] == "]":
            return
        obj, end = decoder.raw_decode(text, at)
        yield obj["id"], text[at:end]
        at = end


class SpeckleServer:
    def __init__(self) -> None:
        self.objects: Dict[str, str] = {}
        self.requests: Counter[str] = Counter()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length", "0")))

            def _answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _form_ids(self) -> list:
                form = urllib.parse.parse_qs(self._body().decode())
                return json.loads(form["objects"][0])

            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                with server.lock:
                    server.requests["GET " + "/".join(parts[:1] + parts[3:])] += 1
                if len(parts) == 4 and parts[0] == "objects" and parts[3] == "single":
                    with server.lock:
                        text = server.objects.get(parts[2])
                    if text is None:
                        self._answer(404, b"not found", "text/plain")
                    else:
                        self._answer(200, text.encode(), "text/plain; charset=utf-8")
                    return
                self._answer(404, b"no such endpoint", "text/plain")

            def do_POST(self) -> None:
                parts = self.path.strip("/").split("/")
                with server.lock:
                    server.requests["POST " + "/".join(parts[:-1])] += 1
                if parts[:2] == ["api", "diff"]:
                    ids = self._form_ids()
                    with server.lock:
                        has = {i: i in server.objects for i in ids}
                    self._answer(200, json.dumps(has).encode())
                elif parts[:2] == ["api", "getobjects"]:
                    ids = self._form_ids()
                    with server.lock:
                        lines = [f"{i}\t{server.objects[i]}\n" for i in ids if i in server.objects]
                    self._answer(200, "".join(lines).encode(), "text/plain; charset=utf-8")
                elif parts[0] == "objects" and len(parts) == 2:
                    head = f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode()
                    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                        head + self._body()
                    )
                    for part in message.iter_parts():
                        text = gzip.decompress(part.get_payload(decode=True)).decode()
                        with server.lock:
                            for obj_id, obj_text in _objects_of(text):
                                server.objects[obj_id] = obj_text
                    self._answer(201, b"{}")
                else:
                    self._answer(404, b"no such endpoint", "text/plain")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
