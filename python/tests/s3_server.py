"""A real S3-compatible server for the remote tests: SeaweedFS (``weed``, installed by
``tests/s3/install.sh``, which ``python/tests/run.sh`` runs) on loopback ports, as the Rust
tests start it (``tests/suite/common/s3.rs``). One ``weed server`` process: master, volume
server, filer and S3 gateway; stopped (SIGKILL) when the fixture ends, and by a watchdog
if the test process dies first.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "objstash"
ACCESS_KEY = "objstash-test"
SECRET_KEY = "objstash-test-secret"


def weed() -> Path:
    """``$OBJSTASH_WEED``, else the binary ``tests/s3/install.sh`` installs."""
    path = Path(os.environ.get("OBJSTASH_WEED", ROOT / "target/s3-venv/bin/weed"))
    if not path.exists():
        raise RuntimeError(
            f"no SeaweedFS binary at {path}: run tests/s3/install.sh "
            "(python/tests/run.sh does) or set OBJSTASH_WEED"
        )
    return path


def _free_base(count: int) -> int:
    """A base port p with p..p+count and their gRPC ports (+10000) free."""
    import random

    while True:
        base = random.randrange(24_000, 29_000, 10)
        try:
            sockets = []
            for port in [base + i for i in range(count)] + [
                base + i + 10_000 for i in range(count)
            ]:
                s = socket.socket()
                s.bind(("127.0.0.1", port))
                sockets.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()


class S3Server:
    """One ``weed server`` with the S3 gateway, in directory ``where``."""

    def __init__(self, where: Path) -> None:
        self.dir = where
        base = _free_base(4)
        master, filer, s3, volume = base, base + 1, base + 2, base + 3
        self.s3_port, self.filer_port = s3, filer
        config = where / "s3.json"
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "objstash",
                            "credentials": [
                                {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}
                            ],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        data = where / "server"
        data.mkdir()
        args = [
            str(weed()),
            "server",
            f"-dir={data}",
            f"-master.port={master}",
            f"-filer.port={filer}",
            f"-volume.port={volume}",
            "-volume.max=0",
            "-master.volumeSizeLimitMB=64",
            "-s3",
            f"-s3.port={s3}",
            f"-s3.config={config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
        ]
        self.log = open(where / "weed.log", "ab")
        # The watchdog: starts weed, waits for its stdin (a pipe from this process) to
        # close, then kills it; so weed dies with the test process, however it ends.
        script = (
            'exec 3<&0; "$@" </dev/null & pid=$!; read -r _ <&3; '
            "kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; exit 0"
        )
        self.process = subprocess.Popen(
            ["sh", "-c", script, "watchdog", *args],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=self.log,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Until the S3 gateway answers and the bucket exists (created through the filer)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{self.filer_port}/buckets/{BUCKET}/", method="POST"
                )
                try:
                    urllib.request.urlopen(request, timeout=5).close()
                except urllib.error.HTTPError as e:
                    if e.code != 409:  # 409: there already
                        raise
                socket.create_connection(("127.0.0.1", self.s3_port), timeout=5).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.dir / "weed.log").read_text(errors="replace")
                    raise RuntimeError(f"SeaweedFS did not start; its log:\n{log}")
                time.sleep(0.2)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def remote(self, prefix: str, **settings: object):
        """An ``objstash.Remote`` under ``prefix`` of the test bucket."""
        from objstash import Remote

        return Remote(
            f"s3://{BUCKET}/{prefix}",
            endpoint=self.endpoint,
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            **settings,  # type: ignore[arg-type]
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait()
        self.log.close()
