"""The cached bundle receive against a real HTTP server on loopback that serves the
``/api/v2`` artifacts listing and the files, made by specklepy's own bundle writer from a
model; every request is counted by the server."""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict

import pytest

pytest.importorskip("pyarrow")

from specklepy.api.credentials import Account  # noqa: E402
from specklepy.api.models import ServerInfo  # noqa: E402
from specklepy.bundle import BundleBuilder, Producer  # noqa: E402
from specklepy.bundle import receive as specklepy_receive  # noqa: E402

from objstash import Stash  # noqa: E402
from objstash.speckle import receive_bundle  # noqa: E402

PROJECT, MODEL = "p1", "m1"


def build_bundle(directory: str, version: str, changed: bool) -> Dict[str, bytes]:
    """A model of 200 walls with geometry, its files named after `version` as a send
    names them; `changed` raises one wall (only the properties file differs)."""
    rnd = random.Random(7)
    builder = BundleBuilder(Producer("objstash-test", "1.0"), "m", output_dir=directory)
    walls = builder.get_or_add_container_path(["Level 1", "Walls"])
    for i in range(200):
        wall = builder.get_or_add_object(f"wall-{i}")
        height = 3.0 + i + (100.0 if changed and i == 5 else 0.0)
        wall.set_properties({"height": height}, name=f"Wall {i}", speckle_type="Wall")
        wall.add_raw_geometry(rnd.randbytes(4000), "brep")
        wall.add_to_group(walls)
    files = builder.build().rename_to(version)
    return {os.path.basename(p): open(p, "rb").read() for p in files.files}


class Server:
    """The artifacts listing and the files of each version, with a count of requests."""

    def __init__(self, versions: Dict[str, Dict[str, bytes]], with_sha256: bool) -> None:
        self.versions = versions
        self.with_sha256 = with_sha256
        self.requests: Counter[str] = Counter()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with server.lock:
                    server.requests[self.path] += 1
                body = server.answer(self.path)
                if body is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, path: str) -> bytes | None:
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v2", "projects"] and parts[-1] == "artifacts":
            files = self.versions.get(parts[7])
            if files is None:
                return None
            listing = []
            for name, data in sorted(files.items()):
                item = {"name": name, "url": f"{self.url}/files/{parts[7]}/{name}"}
                if self.with_sha256:
                    item["sha256"] = hashlib.sha256(data).hexdigest()
                listing.append(item)
            return json.dumps({"files": listing}).encode()
        if parts[0] == "files":
            return self.versions.get(parts[1], {}).get(parts[2])
        return None

    def downloads(self) -> int:
        return sum(n for path, n in self.requests.items() if path.startswith("/files/"))

    def listings(self) -> int:
        return sum(n for path, n in self.requests.items() if path.endswith("/artifacts"))

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()

    def account(self) -> Account:
        return Account(token="token", serverInfo=ServerInfo(url=self.url))


@pytest.fixture(params=[True, False], ids=["listing-with-sha256", "listing-without"])
def server(request, tmp_path):
    versions = {
        "v1": build_bundle(str(tmp_path / "v1"), "v1", changed=False),
        "v2": build_bundle(str(tmp_path / "v2"), "v2", changed=True),
    }
    srv = Server(versions, with_sha256=request.param)
    yield srv
    srv.httpd.shutdown()


def summary(model) -> list:
    return sorted((o.application_id, o.name, dict(o.properties.items())) for o in model.objects)


def test_a_second_receive_downloads_nothing_and_a_new_version_only_what_changed(server, tmp_path):
    account = server.account()
    with Stash(str(tmp_path / "bundles.objstash")) as cache:
        model = receive_bundle(account, PROJECT, MODEL, "v1", cache=cache, mark_received=False)
        files = len(server.versions["v1"])
        assert (server.listings(), server.downloads()) == (1, files)
        # What specklepy's own receive gives, from the same server.
        server.reset()
        theirs = specklepy_receive(account, PROJECT, MODEL, "v1", mark_received=False)
        assert server.downloads() == files
        assert summary(model) == summary(theirs) and len(model.objects) == 200
        assert sorted(os.path.basename(f) for f in model.files) == sorted(
            os.path.basename(f) for f in theirs.files
        )
        theirs.close()
        directory = model.directory
        model.close()
        assert not os.path.exists(directory), "closing the model deletes its working copy"

        # Again: no request at all.
        server.reset()
        again = receive_bundle(account, PROJECT, MODEL, "v1", cache=cache, mark_received=False)
        assert (server.listings(), server.downloads()) == (0, 0)
        assert summary(again) == summary(model)
        again.close()

        # A new version: the listing, and only the files the cache cannot match.
        server.reset()
        second = receive_bundle(account, PROJECT, MODEL, "v2", cache=cache, mark_received=False)
        v1, v2 = server.versions["v1"], server.versions["v2"]
        changed = sum(1 for name, data in v2.items() if data != v1.get(name.replace("v2", "v1", 1)))
        assert changed == 1
        expected = changed if server.with_sha256 else len(v2)
        assert (server.listings(), server.downloads()) == (1, expected)
        heights = {o.application_id: o.properties["height"] for o in second.objects}
        assert heights["wall-5"] == 108.0 and heights["wall-6"] == 9.0
        second.close()
        assert cache.verify().ok


def test_a_version_without_a_bundle_is_an_error_and_caches_nothing(server, tmp_path):
    from specklepy.logging.exceptions import SpeckleException

    with Stash(str(tmp_path / "bundles.objstash")) as cache:
        with pytest.raises(SpeckleException, match="no artefact bundle"):
            receive_bundle(server.account(), PROJECT, MODEL, "v9", cache=cache, mark_received=False)
        assert len(cache) == 0


def test_a_download_that_does_not_match_the_listing_is_refused(server, tmp_path):
    from specklepy.logging.exceptions import SpeckleException

    if not server.with_sha256:
        pytest.skip("only a listing with sha256 says what a file must hold")
    name = sorted(server.versions["v1"])[0]
    server.versions["v1"] = dict(server.versions["v1"])
    listing_bytes = server.versions["v1"][name]
    original = server.answer

    def tampered(path: str) -> bytes | None:
        if path.endswith(f"/files/v1/{name}"):
            return listing_bytes + b"tampered"
        return original(path)

    server.answer = tampered  # type: ignore[method-assign]
    with Stash(str(tmp_path / "bundles.objstash")) as cache:
        with pytest.raises(SpeckleException, match="sha256"):
            receive_bundle(server.account(), PROJECT, MODEL, "v1", cache=cache, mark_received=False)
        assert cache.get_named(f"speckle-bundle:{server.url}/{PROJECT}/{MODEL}/v1/") is None


def test_a_server_that_cannot_be_reached_is_a_speckle_error_not_httpx(tmp_path):
    """``receive_bundle`` with the server down raised a raw ``httpx.ConnectError``."""
    import socket

    from specklepy.logging.exceptions import SpeckleException

    with socket.socket() as s:  # a port nobody listens on once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    account = Account(token="token", serverInfo=ServerInfo(url=f"http://127.0.0.1:{port}"))
    with Stash(str(tmp_path / "bundles.objstash")) as cache:
        with pytest.raises(SpeckleException, match="could not reach"):
            receive_bundle(account, PROJECT, MODEL, "v1", cache=cache, mark_received=False)
        assert len(cache) == 0
