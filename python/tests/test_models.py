"""Models from Python: declared, assembled, listed, pinned, removed, read whole; kept and
evicted whole; an assembly across a fork and in a pool's workers."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest

import objstash
from objstash import Model, Stash


def model(seed: int, n: int) -> tuple[bytes, list[bytes]]:
    """A root that lists `n` members, as a Speckle root lists its closure."""
    members = [
        json.dumps({"seed": seed, "i": i, "pad": "ab" * (100 + i % 30)}).encode()
        for i in range(n)
    ]
    root = json.dumps({"root": seed, "n": n}).encode()
    return root, members


def whole_or_absent(stash: Stash, root: bytes, members: list[bytes]) -> bool:
    """The invariant, in one read: the root absent, or it and every member readable."""
    keys = [objstash_key(stash, root)] + [objstash_key(stash, m) for m in members]
    read = stash.get_many(keys)
    if read[0] is None:
        return False
    assert read[0] == root
    assert read[1:] == members, "a member of a readable root is missing"
    return True


def objstash_key(stash: Stash, data: bytes) -> str:
    return objstash.key_of(data)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "models.db")


def test_a_saved_model_reads_back_whole_and_is_listed(path):
    root, members = model(1, 300)
    with Stash(path) as stash:
        saved = stash.save_model(root, members, name="commit-1")
        assert isinstance(saved, Model) and saved.complete
        assert (saved.objects, saved.missing, saved.name) == (301, 0, "commit-1")
        assert whole_or_absent(stash, root, members)
        read = stash.read_model(saved.root)
        assert read is not None and len(read) == 301
        assert sorted(data for _, data in read) == sorted(members + [root])
        assert all(objstash_key(stash, data) == key for key, data in read)
        assert [m.root for m in stash.models()] == [saved.root]
        assert stash.model(saved.root) == stash.models()[0]
        assert stash.model("0" * 64) is None
        assert stash.read_model("0" * 64) is None
        assert "301 objects" in str(saved) and "complete" in str(saved)
        assert stash.pin_model(saved.root) and stash.model(saved.root).pinned
        stash.trim_to(1)
        assert whole_or_absent(stash, root, members), "pinned models stay"
        assert stash.unpin_model(saved.root)
        assert stash.remove_model(saved.root)
        assert stash.get(saved.root) is None and stash.models() == []
        assert not stash.remove_model(saved.root)


def test_a_removed_member_makes_the_root_absent_until_it_comes_back(path):
    root, members = model(2, 100)
    with Stash(path) as stash:
        saved = stash.save_model(root, members)
        assert stash.remove(objstash_key(stash, members[10]))
        assert stash.get(saved.root) is None and saved.root not in stash
        assert stash.missing([saved.root]) == [saved.root]
        assert stash.model(saved.root).missing == 1
        assert stash.read_model(saved.root) is None
        stash.save(members[10])
        stash.flush()
        assert whole_or_absent(stash, root, members)


def test_a_declared_model_and_an_assembly_by_name(path):
    root, members = model(3, 50)
    names = [f"id-{i}" for i in range(50)]
    with Stash(path, eviction_grace=0) as stash:
        stash.save_named(list(zip(names[:20], members[:20])))
        with stash.assemble() as assembly:
            held = assembly.hold_named(names)
            assert held[:20] == [objstash_key(stash, m) for m in members[:20]]
            assert held[20:] == [None] * 30
            # Held: an eviction of everything unused does not take them.
            stash.evict_unused_since(0)
            assert stash.missing(held[:20]) == []
            keys = assembly.save_named(list(zip(names[20:], members[20:])))
            root_key = assembly.save(root)
            done = assembly.finish(root_key, held[:20] + keys, name=b"\xff not utf-8")
            assert done.complete and done.name == b"\xff not utf-8"
            assert not assembly.active
        assert whole_or_absent(stash, root, members)
        # Declared with a member not stored: the root reads as absent.
        other = stash.save(b"another root")
        declared = stash.declare_model(other, [objstash_key(stash, b"not stored")])
        assert declared.missing == 1 and stash.get(other) is None


def test_an_assembly_finishes_a_closure_of_names(path):
    root, members = model(6, 60)
    names = [f"id-{i}" for i in range(60)]
    with Stash(path, eviction_grace=0) as stash:
        # Ten cached by an earlier write; the assembly holds them by name when it finishes.
        stash.save_named(list(zip(names[:10], members[:10])))
        with stash.assemble() as assembly:
            assembly.hold_named(names[10:20] + ["not cached"])  # none stored yet
            assembly.save_named(list(zip(names[10:], members[10:])) + [("root", root)])
            # A closure that names an object nobody saved: nothing is declared, the
            # assembly goes on, and the absent names are said.
            done, absent = assembly.finish_closure("root", names + ["gone-1", "gone-2"])
            assert done is None and absent == ["gone-1", "gone-2"]
            assert assembly.active
            # A root the assembly does not know: nothing to declare, nothing absent.
            assert assembly.finish_closure("no such root", names) == (None, [])
            done, absent = assembly.finish_closure("root", names, name="model-6")
            assert absent == [] and not assembly.active
            assert done.complete and done.name == "model-6"
            assert done.root == objstash_key(stash, root) and done.objects == 61
        assert whole_or_absent(stash, root, members)
        assert [(m.root, m.objects, m.complete) for m in stash.models()] == [(done.root, 61, True)]


def test_an_assembly_left_by_an_exception_is_given_up(path):
    _, members = model(4, 40)
    with Stash(path, eviction_grace=0) as stash:
        with pytest.raises(RuntimeError):
            with stash.assemble() as assembly:
                keys = assembly.save_all(members)
                raise RuntimeError("the download failed")
        assert not assembly.active
        with pytest.raises(objstash.Error, match="finished or given up"):
            assembly.save(b"late")
        stash.flush()
        stash.evict_unused_since(0)
        assert stash.missing(keys) == keys, "given up: loose, and evicted as loose"


def test_an_assembly_dropped_unfinished_is_given_up(path):
    _, members = model(5, 40)
    with Stash(path, eviction_grace=0) as stash:
        assembly = stash.assemble()
        keys = assembly.save_all(members)
        del assembly
        stash.flush()
        stash.evict_unused_since(0)
        assert stash.missing(keys) == keys


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_an_assembly_belongs_to_the_process_that_began_it(path):
    root, members = model(6, 60)
    with Stash(path, eviction_grace=0) as stash:
        assembly = stash.assemble()
        keys = assembly.save_all(members[:30])
        pid = os.fork()
        if pid == 0:  # the child: the inherited assembly refuses; the stash works
            code = 0
            try:
                assembly.save(b"from the child")
                code = 1
            except objstash.Error as e:
                code = 0 if "another process" in str(e) else 2
            try:
                stash.save(b"the child's own object")
                stash.flush()
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # The parent's assembly goes on across the fork (the handle reopened).
        keys += assembly.save_all(members[30:])
        done = assembly.finish(assembly.save(root), keys)
        assert done.complete
        assert whole_or_absent(stash, root, members)
        assert stash.contains(objstash_key(stash, b"the child's own object"))


def _save_model_in_worker(args: tuple[str, int]) -> str:
    path, seed = args
    root, members = model(seed, 200)
    with Stash(path) as stash:
        return stash.save_model(root, members, name=f"worker-{seed}").root


def test_models_saved_by_a_pool_of_processes(path):
    Stash(path).close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        roots = pool.map(_save_model_in_worker, [(path, seed) for seed in range(10, 16)])
    with Stash(path) as stash:
        listed = {m.root: m for m in stash.models()}
        assert set(listed) == set(roots)
        assert all(m.complete and m.objects == 201 for m in listed.values())
        for seed in range(10, 16):
            root, members = model(seed, 200)
            assert whole_or_absent(stash, root, members)


def test_a_model_streams_in_bounded_memory_while_another_process_removes_it(path):
    import subprocess
    import sys

    root, members = model(61, 6000)
    with Stash(path) as stash:
        saved = stash.save_model(root, members)
        whole = stash.read_model(saved.root)
        stream = stash.read_model_iter(saved.root)
        assert stream is not None
        first = next(stream)
        remove = (
            "import objstash, sys\n"
            "with objstash.Stash(sys.argv[1]) as stash:\n"
            "    assert stash.remove_model(sys.argv[2])\n"
        )
        subprocess.run([sys.executable, "-c", remove, path, saved.root], check=True)
        assert stash.get(saved.root) is None, "the other process removed it"
        assert [first] + list(stream) == whole, "the model as it was when the stream began"
        assert stash.read_model_iter(saved.root) is None
        # A stream left unfinished keeps neither a close nor the interpreter waiting.
        stash.save_model(root, members)
        unfinished = stash.read_model_iter(saved.root)
        assert next(unfinished)[0] in {k for k, _ in whole}
    with pytest.raises(RuntimeError, match="closed"):
        list(unfinished)
