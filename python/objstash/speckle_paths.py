"""Where specklepy keeps its local caches: the directories the Speckle caches of objstash
use too (``ObjstashTransport``, the bundle cache)."""

from __future__ import annotations


def default_base_path(app_name: str) -> str:
    """Where specklepy keeps its SQLite cache for `app_name`: the same directory."""
    from specklepy.core.helpers import speckle_path_provider

    return str(speckle_path_provider.user_application_data_path().joinpath(app_name))
