"""The remote tier from Python, against a real S3-compatible server (SeaweedFS on
loopback, ``s3_server.py``): ``Stash(..., remote=...)`` with a URL or a ``Remote``, push,
pull, read-through, write-behind, the environment's settings, a pool of forked workers
reading through one inherited handle, and the errors of bad settings and a remote down.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

import objstash
from objstash import Remote, Stash
from s3_server import ACCESS_KEY, BUCKET, SECRET_KEY, S3Server

#: The longest a pool may take before the test calls it hung (a deadline, not a wait).
HANG = float(os.environ.get("OBJSTASH_TEST_HANG", "120"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = S3Server(tmp_path_factory.mktemp("s3"))
    yield s
    s.stop()


def objects(n: int, seed: int) -> list[bytes]:
    return [b'{"seed": %d, "i": %d, "pad": "%s"}' % (seed, i, b"xy" * 60) for i in range(n)]


def test_push_read_through_and_pull_between_three_stashes(server, tmp_path):
    remote = server.remote("py-team", pack_size=64 << 10)
    data = objects(3_000, 1)
    with Stash(tmp_path / "a.db", remote=remote) as a:
        assert a.remote_url == f"s3://{BUCKET}/py-team"
        keys = a.save_all(data)
        pushed = a.push()
        assert (pushed.objects, pushed.corrupt) == (3_000, 0), pushed
        assert pushed.packs >= 2 and pushed.requests <= 3 * pushed.packs + 2, pushed
        again = a.push()
        assert (again.objects, again.already_remote) == (0, 3_000), again

    nowhere = "00" * 32
    with Stash(tmp_path / "b.db", remote=remote) as b:
        # Read-through: fetched, checked, kept locally.
        assert b.get(keys[7]) == data[7]
        assert b.contains(keys[7])
        assert b.get_many(keys[::11]) == data[::11]
        assert b.get(nowhere) is None
        assert b.remote_missing([keys[0], nowhere]) == [nowhere]
        status = b.remote_status()
        assert (status.objects, status.packs) == (3_000, pushed.packs), status
        assert status.bytes == pushed.bytes and status.local_index_bytes > 0, status
        # B listed the whole log at its first read; this refresh lists from its cursor.
        assert not status.full_listing and status.requests == 1, status
        assert f"s3://{BUCKET}/py-team" in str(status)

    with Stash(tmp_path / "c.db", remote=remote) as c:
        pulled = c.pull()
        assert pulled.complete and pulled.objects == 3_000, pulled
        assert c.missing(keys) == []
        assert c.verify().ok


def test_write_behind_uploads_in_the_background(server, tmp_path):
    data = objects(800, 2)
    with Stash(tmp_path / "a.db", remote=server.remote("py-behind", write_behind=0.05)) as a:
        keys = a.save_all(data)
        # Returns once a round that started after it uploaded everything saved before.
        a.flush_remote()
        with Stash(tmp_path / "b.db", remote=server.remote("py-behind")) as b:
            assert b.remote_missing(keys) == []
            assert b.get_many(keys) == data


def test_a_url_takes_the_endpoint_and_credentials_from_the_environment(
    server, tmp_path, monkeypatch
):
    with Stash(tmp_path / "a.db", remote=server.remote("py-env")) as a:
        keys = a.save_all(objects(50, 3))
        a.push()
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    with Stash(tmp_path / "b.db", remote=f"s3://{BUCKET}/py-env") as b:
        assert b.get_many(keys) == objects(50, 3)


#: The stash a pool's forked workers inherit.
_inherited: Stash | None = None


def _read_through(keys: list[str]) -> list[bytes | None]:
    assert _inherited is not None
    return _inherited.get_many(keys)


def test_a_pool_of_forked_workers_reads_through_one_inherited_handle(server, tmp_path):
    global _inherited
    remote = server.remote("py-fork", pack_size=64 << 10)
    data = objects(2_000, 4)
    with Stash(tmp_path / "a.db", remote=remote) as a:
        keys = a.save_all(data)
        a.push()
    _inherited = Stash(tmp_path / "b.db", remote=remote)
    try:
        # The parent has listed the remote: the children inherit a handle with a remote
        # and a catalog, and each reopens both after its fork.
        assert _inherited.remote_status().objects == 2_000
        chunks = [keys[i::4] for i in range(4)]
        with multiprocessing.get_context("fork").Pool(2) as pool:
            answers = pool.map_async(_read_through, chunks).get(timeout=HANG)
        for i, got in enumerate(answers):
            assert got == data[i::4]
        # What the children read through, they stored: the parent has it all locally.
        assert _inherited.missing(keys) == []
        assert _inherited.verify().ok
        # And the parent's handle goes on with its remote.
        assert _inherited.push().already_remote == 2_000
    finally:
        _inherited.close()
        _inherited = None


def test_bad_settings_and_a_remote_that_is_down_say_so(tmp_path):
    with pytest.raises(objstash.SettingsError, match="s3://"):
        Stash(tmp_path / "a.db", remote="http://example.com/bucket")
    with pytest.raises(objstash.SettingsError, match="secret_key"):
        Stash(tmp_path / "b.db", remote=Remote("s3://abc", access_key="only-the-key"))
    with pytest.raises(TypeError, match="remote must be"):
        Stash(tmp_path / "c.db", remote=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="write_behind"):
        Stash(tmp_path / "d.db", remote=Remote("s3://abc", write_behind=-1))
    with Stash(tmp_path / "e.db") as plain:
        assert plain.remote_url is None
        with pytest.raises(objstash.SettingsError, match="no remote"):
            plain.push()
        with pytest.raises(objstash.SettingsError, match="no remote"):
            plain.remote_missing([])
    # Nothing listens on port 9: the remote calls fail, the local stash goes on.
    down = Remote("s3://abc/x", endpoint="http://127.0.0.1:9", retries=0, timeout=5)
    with Stash(tmp_path / "f.db", remote=down) as s:
        key = s.save(b"kept locally")
        with pytest.raises(objstash.RemoteError, match="remote failed"):
            s.push()
        with pytest.raises(objstash.RemoteError):
            s.get("00" * 32)
        assert s.get(key) == b"kept locally"
        assert isinstance(objstash.RemoteCorruptError("x"), objstash.CorruptError)


def test_a_remote_prints_without_its_secrets():
    remote = Remote("s3://abc/x", access_key="AKIA-visible", secret_key="hidden-secret")
    assert "hidden-secret" not in repr(remote) and "AKIA-visible" not in repr(remote)


def test_trim_and_collect_the_remote_from_python(server, tmp_path):
    import time

    remote = server.remote("py-trim", pack_size=64 << 10, clock_skew=0)
    old, new = objects(1_000, 5), objects(1_000, 6)
    with Stash(tmp_path / "a.db", remote=remote) as a:
        old_keys = a.save_all(old)
        a.push()
    cut = time.time() + 0.002
    while time.time() <= cut:
        pass
    with Stash(tmp_path / "b.db", remote=remote) as b:
        new_keys = b.save_all(new)
        b.push()
    with Stash(tmp_path / "t.db", remote=remote) as t:
        trimmed = t.remote_trim(unused_since=cut, grace=0)
        assert trimmed.unused >= 1 and trimmed.size_after < trimmed.size_before, trimmed
        assert "unused packs" in str(trimmed)
        assert t.remote_missing(old_keys) == old_keys
        assert t.remote_missing(new_keys) == []
        assert t.get_many(new_keys) == new
        collected = t.remote_gc(grace=0, orphan_grace=0)
        assert (collected.duplicates, collected.orphans) == (0, 0), collected
        status = t.remote_status()
        assert status.last_collection and status.last_trim, status
        compacted = t.remote_compact()
        assert compacted.entries == 1_000 and "compacted" in str(compacted), compacted
        with Stash(tmp_path / "new.db", remote=remote) as n:
            assert n.get_many(new_keys) == new
            assert n.remote_status().index_shards == 1
        assert status.objects == 1_000, status
        with pytest.raises(ValueError, match="max_size, unused_for"):
            t.remote_trim()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_speckle_model_sent_on_one_machine_is_received_on_another(server, tmp_path):
    pytest.importorskip("specklepy")
    from specklepy.api import operations

    from objstash.speckle import ObjstashTransport
    from speckle_model import build_model

    remote = server.remote("py-speckle", pack_size=256 << 10)
    model = build_model(40, seed=3)
    with ObjstashTransport(path=str(tmp_path / "a.objstash"), remote=remote) as sender:
        root_id = operations.send(model, [sender], use_default_cache=False)
        # Pushed in the background after the send's end_write; close waits for it.
    with ObjstashTransport(path=str(tmp_path / "b.objstash"), remote=remote) as receiver:
        # A machine that never saw the model: every object comes through the remote by id.
        received = operations.receive(root_id, local_transport=receiver)
        assert operations.serialize(received) == operations.serialize(model)
        assert receiver.stash.stats().objects > 0
    # Then it is local: the same receive with no remote at all.
    with ObjstashTransport(path=str(tmp_path / "b.objstash")) as offline:
        again = operations.receive(root_id, local_transport=offline)
        assert operations.serialize(again) == operations.serialize(model)
