"""Spans reach Python's logging: ``trace_to_logging`` and ``OBJSTASH_LOG`` route the
library's spans, with their sizes and times, to the logger ``objstash.trace``. Records
arrive from a thread of their own: the tests wait for them, with a deadline that only
turns a hang into a failure."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest

import objstash
from objstash import Stash

HANG = float(os.environ.get("OBJSTASH_TEST_HANG", "120"))


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def wait_for(handler: Collect, text: str) -> str:
    deadline = time.monotonic() + HANG
    while True:
        for message in list(handler.messages):
            if text in message:
                return message
        assert time.monotonic() < deadline, f"no record with {text!r}: {handler.messages[-20:]}"
        time.sleep(0.01)


def test_spans_reach_logging_with_their_sizes_and_off_stops_them(tmp_path):
    logger = logging.getLogger("objstash.trace")
    handler = Collect()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        objstash.trace_to_logging("objstash=debug")
        with Stash(str(tmp_path / "s.db")) as stash:
            stash.save_all([b'{"traced": %d}' % i for i in range(777)])
            stash.flush()
            message = wait_for(handler, "save_batch objects=777")
            assert "new=777" in message and " took " in message, message
            wait_for(handler, "commit rows=")
        wait_for(handler, "checkpoint mode=close")
        with pytest.raises(ValueError, match="is not a filter"):
            objstash.trace_to_logging("objstash=loud")
        objstash.trace_to_logging("off")
        seen = len(handler.messages)
        with Stash(str(tmp_path / "quiet.db")) as stash:
            stash.save_all([b'{"quiet": %d}' % i for i in range(555)])
        # Records already queued may still arrive; none of this stash's.
        assert not any("objects=555" in m for m in handler.messages[seen:])
    finally:
        objstash.trace_to_logging("off")
        logger.removeHandler(handler)


def test_objstash_log_at_import_sends_spans_to_logging_until_the_process_exits(tmp_path):
    """The variable alone turns the bridge on; the closes at exit are still logged and the
    process exits cleanly."""
    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format='%(name)s %(message)s')\n"
        "from objstash import Stash\n"
        f"stash = Stash({str(tmp_path / 'env.db')!r})\n"
        "stash.save_all([b'{\"env\": %d}' % i for i in range(321)])\n"
        "# not closed: the exit closes it\n"
    )
    env = {**os.environ, "OBJSTASH_LOG": "objstash=debug"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=HANG
    )
    assert done.returncode == 0, done.stderr
    assert "objstash.trace save_batch objects=321" in done.stdout, done.stdout
    assert "checkpoint mode=close" in done.stdout, done.stdout
