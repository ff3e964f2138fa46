"""Python after damage: the advice a damage error gives works when followed, ``repair`` is
there, and a rebuild that lost data says so through ``warnings`` and ``logging``."""

from __future__ import annotations

import logging
import os
import random
import warnings

import pytest

import objstash
from objstash import Stash


def objects(n: int) -> list[bytes]:
    return [b'{"n": %d, "pad": "%s"}' % (i, b"ab" * (100 + i % 50)) for i in range(n)]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "damaged.db")


def fill(path: str, n: int = 20_000) -> list[str]:
    with Stash(path) as stash:
        keys = stash.save_all(objects(n))
        stash.save_named([(f"id-{i}", o) for i, o in enumerate(objects(200))])
    return keys


def test_random_bytes_in_the_middle_the_advice_works_and_repair_rebuilds(path):
    keys = fill(path)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        f.write(random.Random(1).randbytes(64 * 1024))
    stash = Stash(path)
    report = stash.verify()
    assert not report.ok, "the damage is found"
    # The advice of the report: remove what is damaged. Where the damage is in the pages
    # the removal must change, the writer stops and says how to rebuild the file.
    try:
        stash.remove_all(report.corrupt)
    except objstash.WriterStoppedError as e:
        assert "repair" in str(e), str(e)
        # Reads and verify still work on what was committed.
        assert not stash.verify().ok
    try:
        stash.close()
    except objstash.WriterStoppedError as e:
        assert "repair" in str(e), str(e)
    repaired = objstash.repair(path)
    assert isinstance(repaired, objstash.RecoveryReport)
    assert repaired.trigger == "repair" and repaired.recovered > 0
    assert repaired.recovered + repaired.dropped <= len(keys) + 200
    with Stash(path) as stash:
        assert stash.verify().ok
        found = stash.get_many(keys)
        assert sum(f is not None for f in found) >= repaired.recovered - 200
    # A sound stash: repair says so and changes nothing.
    again = objstash.repair(path)
    assert not again.lost_anything and again.problem is None, again


def test_a_writer_that_met_damage_makes_the_next_open_rebuild_and_say_what_was_lost(path):
    keys = fill(path)
    # Damage every page of the second half but the last: removals there hit it.
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        f.write(b"\\xff" * (size // 2 - 8192))
    stash = Stash(path)
    with pytest.raises(objstash.WriterStoppedError, match="repair"):
        stash.remove_all(keys)
        stash.flush()
    with pytest.raises(objstash.WriterStoppedError):
        stash.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stash = Stash(path)
    lost = [w for w in caught if issubclass(w.category, objstash.DataLossWarning)]
    assert lost, [str(w.message) for w in caught]
    report = stash.recovery_report
    assert report is not None and report.lost_anything and report.trigger != "repair"
    assert report.damaged_copy is not None and os.path.exists(report.damaged_copy)
    assert stash.verify().ok
    stash.close()


def test_a_file_cut_in_half_is_rebuilt_with_a_warning_and_a_log_line(path, caplog):
    fill(path)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    caplog.set_level(logging.WARNING, logger="objstash")
    with pytest.warns(objstash.DataLossWarning, match="lost"):
        stash = Stash(path)
    report = stash.recovery_report
    assert report is not None and report.lost_anything
    assert report.damaged_copy is not None and os.path.exists(report.damaged_copy)
    assert any("lost" in r.getMessage() for r in caplog.records)
    assert stash.verify().ok
    stash.close()
