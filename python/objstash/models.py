"""Models: a root object and the objects it lists, which a stash keeps, evicts, pins and
reports together. Whenever a model's root can be read, every object the model lists can
be read; while one is not stored, the root reads as absent (``get`` returns None), so a
client that trusts a cached root to mean a cached model falls back to its server.

    with stash.assemble() as assembly:            # a copy from a server, root last
        have = assembly.hold_named(child_ids)     # held: not evicted meanwhile
        assembly.save_named(fetched_children)
        root = assembly.save(root_bytes)
        model = assembly.finish(root, member_keys, name=root_id)
    stash.models()                                # listed, least recently used first
    stash.read_model(root)                        # every object, in storage order
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    """A model as the stash reports it (``Stash.model``, ``Stash.models``)."""

    root: str
    """The key of its root."""
    name: str | bytes | None
    """The name it was declared under (str when it is UTF-8), if any."""
    objects: int
    """Objects it lists, its root included."""
    missing: int
    """Of those, how many are not stored; while any is, the root reads as absent."""
    stored_bytes: int
    """Stored bytes of its objects (an object several models list counts in each)."""
    last_use: float | None
    """Seconds since the epoch of its last use: its declaration, or a read of it or of
    one of its objects."""
    pinned: bool
    """Whether it is pinned: never evicted."""

    @property
    def complete(self) -> bool:
        """Whether every object it lists is stored: then, and only then, its root reads."""
        return self.missing == 0

    def __str__(self) -> str:
        name = f" ({self.name!s})" if self.name is not None else ""
        state = "complete" if self.complete else f"missing {self.missing}"
        used = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.last_use))
            if self.last_use
            else "never"
        )
        pinned = ", pinned" if self.pinned else ""
        return (
            f"{self.root}{name}: {self.objects} objects, {self.stored_bytes} stored bytes, "
            f"{state}, last used {used} UTC{pinned}"
        )


__all__ = ["Model"]
