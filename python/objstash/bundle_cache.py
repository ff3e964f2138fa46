"""A cache for Speckle's bundle receive: ``specklepy.bundle.receive`` that keeps the
version's parquet files in a stash and downloads each at most once.

    from objstash.speckle import receive_bundle

    model = receive_bundle(account, project_id, model_id, version_id)  # a specklepy Model
    ...
    model.close()                    # deletes the working copy; the stash keeps the files

specklepy's own receive lists the version's artifacts and downloads every file into a
temporary directory each time. Version ids never change, so a cache is safe:

- a version received before is read from the stash with no request at all (its listing
  is kept under a name derived from the server, project, model and version);
- a file is not downloaded when the stash holds it under its name, or, when the server's
  listing gives a ``sha256`` for it, under that hash (another version's file with the
  same bytes: bundle files are named after their version, so only the content says they
  are the same);
- a file is streamed into the stash as it downloads (large files in chunks, bounded
  memory), and a download whose bytes do not match the listing's ``sha256`` is refused.

The result is what ``specklepy.bundle.receive`` returns: a ``Model`` over a working
directory of the files (copied out of the stash), which ``Model.close`` deletes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, Iterator, List, Optional, Tuple, Union

import httpx
from specklepy.api.credentials import Account
from specklepy.bundle.bundle_reader import read_bundle
from specklepy.bundle.download import is_bare_file_name
from specklepy.bundle.model import Model
from specklepy.logging.exceptions import SpeckleException

from objstash import Stash

#: What a name of the cache starts with.
PREFIX = "speckle-bundle:"
#: Bytes a download hands the stash per read.
READ_BYTES = 1 << 20


def default_cache_path() -> str:
    """Where the bundle cache lives by default: beside specklepy's own caches."""
    from objstash.speckle_paths import default_base_path

    return os.path.join(default_base_path("Speckle"), "Bundles.objstash")


def receive_bundle(
    account: Account,
    project_id: str,
    model_id: str,
    version_id: str,
    *,
    cache: Union[Stash, str, None] = None,
    include_geometry: bool = True,
    mark_received: bool = True,
    timeout: float = 120.0,
) -> Model:
    """``specklepy.bundle.receive`` through a cache. ``cache`` is an open stash, a path,
    or None for :func:`default_cache_path`; the other arguments are specklepy's."""
    if isinstance(cache, Stash):
        stash, owned = cache, False
    else:
        stash, owned = Stash(cache or default_cache_path()), True
    try:
        server = (account.serverInfo.url or "").rstrip("/")
        version = f"{PREFIX}{server}/{project_id}/{model_id}/{version_id}"
        files = _cached(stash, version, include_geometry)
        if files is None:
            ids = (project_id, model_id, version_id)
            try:
                files = _fetch(account, stash, version, ids, include_geometry, timeout)
            except httpx.TransportError as e:
                raise SpeckleException(
                    f"could not reach the Speckle server at {server} ({e}); a version "
                    "received once is read from the cache without it"
                ) from e
        model = _materialize(stash, files, project_id, model_id, version_id, include_geometry)
    finally:
        if owned:
            stash.close()
    if mark_received:
        try:
            _mark_received(account, project_id, version_id)
        except httpx.TransportError as e:
            model.close()
            raise SpeckleException(
                f"received version {version_id} (cached), but could not tell the server at "
                f"{server}: {e}; pass mark_received=False to receive offline"
            ) from e
        except BaseException:
            model.close()
            raise
    return model


def _wanted(name: str, include_geometry: bool) -> bool:
    """The files a receive takes, as specklepy's download chooses them."""
    if ".viewer." in name:
        return False
    is_shard = ".geometries" in name and name.endswith(".parquet")
    return include_geometry or not is_shard


def _cached(
    stash: Stash, version: str, include_geometry: bool
) -> Optional[List[Tuple[str, str]]]:
    """The files of a version received before, if the stash still holds every one."""
    listing = stash.get_named(version + "/")
    if listing is None:
        return None
    entry = json.loads(listing)
    if include_geometry and not entry["geometry"]:
        return None
    files = [
        (f["name"], f["key"]) for f in entry["files"] if _wanted(f["name"], include_geometry)
    ]
    evicted = stash.missing([key for _, key in files])
    return None if evicted else files


class _Download:
    """A streamed download as a binary file object, hashed as it is read."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = bytearray()
        self.sha256 = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buffer) < n:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self.sha256.update(chunk)
            self._buffer += chunk
        size = len(self._buffer) if n < 0 else min(n, len(self._buffer))
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out


def _fetch(
    account: Account,
    stash: Stash,
    version: str,
    ids: Tuple[str, str, str],
    include_geometry: bool,
    timeout: float,
) -> List[Tuple[str, str]]:
    """Lists the version's artifacts and stores the files the stash lacks."""
    project_id, model_id, version_id = ids
    base = (account.serverInfo.url or "").rstrip("/") + "/api/v2/"
    headers = {"Authorization": f"Bearer {account.token}"} if account.token else {}
    with httpx.Client(base_url=base, headers=headers, timeout=timeout) as speckle:
        response = speckle.get(
            f"projects/{project_id}/models/{model_id}/versions/{version_id}/artifacts"
        )
    listed: List[Any] = [] if response.status_code == 404 else _listing(response)
    if not listed:
        raise SpeckleException(
            f"Version '{version_id}' (model '{model_id}', project '{project_id}') has no "
            f"artefact bundle on '{account.serverInfo.url}': the server may not serve "
            "/api/v2 artifacts, the token cannot read the project, or the bundle has not "
            "been produced."
        )
    files: List[Tuple[str, str]] = []
    # Presigned urls are already authorized: the Speckle token never goes to storage.
    with httpx.Client(timeout=timeout) as storage:
        for item in listed:
            name = item.get("name")
            if not is_bare_file_name(name):
                raise SpeckleException(
                    f"Artifact listing contains an invalid file name '{name}'."
                )
            if not _wanted(name, include_geometry):
                continue
            files.append((name, _file(stash, storage, version, name, item)))
    entry = {"geometry": include_geometry, "files": [{"name": n, "key": k} for n, k in files]}
    # The listing last: a version is only taken from the cache once all its files are in.
    stash.save_named({version + "/": json.dumps(entry)})
    stash.flush()
    return files


def _listing(response: httpx.Response) -> List[Any]:
    if response.is_error:
        raise SpeckleException(
            f"Listing artifacts failed with {response.status_code}: {response.text}"
        )
    return list(response.json().get("files") or [])


def _file(stash: Stash, storage: httpx.Client, version: str, name: str, item: Any) -> str:
    """The key of one listed file: found by name, or by the listing's sha256, or
    downloaded into the stash."""
    by_name = f"{version}/{name}"
    key = stash.resolve(by_name)
    if key is not None and key in stash:
        return key
    sha256 = item.get("sha256")
    if isinstance(sha256, str):
        key = stash.resolve(f"sha256:{sha256.lower()}")
        if key is not None and stash.name(by_name, key):
            return key
    with storage.stream("GET", item["url"]) as download:
        if download.is_error:
            download.read()
            raise SpeckleException(
                f"Downloading artifact '{name}' failed with {download.status_code}: "
                f"{download.text}"
            )
        source = _Download(download.iter_bytes(READ_BYTES))
        key = stash.save_file(source)
    digest = source.sha256.hexdigest()
    if isinstance(sha256, str) and sha256.lower() != digest:
        raise SpeckleException(
            f"Artifact '{name}' downloaded with sha256 {digest}, but the listing says "
            f"{sha256}; it was not taken into the cache."
        )
    stash.name(f"sha256:{digest}", key)
    stash.name(by_name, key)
    return key


def _materialize(
    stash: Stash,
    files: List[Tuple[str, str]],
    project_id: str,
    model_id: str,
    version_id: str,
    include_geometry: bool,
) -> Model:
    """The files copied out of the stash into a working directory, read as a Model."""
    directory = tempfile.mkdtemp(prefix="speckle-bundle-")
    try:
        paths = []
        for name, key in files:
            reader = stash.open(key)
            if reader is None:
                raise SpeckleException(
                    f"Artifact '{name}' left the cache while it was received; receive again."
                )
            path = os.path.join(directory, name)
            with reader, open(path, "wb") as out:
                shutil.copyfileobj(reader, out, READ_BYTES)
            paths.append(path)
        return Model(
            project_id,
            model_id,
            version_id,
            directory,
            sorted(paths),
            read_bundle(directory),
            geometry_downloaded=include_geometry,
        )
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def _mark_received(account: Account, project_id: str, version_id: str) -> None:
    """Tells the server the version was received, as specklepy's receive does."""
    from specklepy.api.client import SpeckleClient
    from specklepy.api.inputs.version_inputs import MarkReceivedVersionInput

    url = account.serverInfo.url or ""
    client = SpeckleClient(host=url, use_ssl=url.startswith("https"))
    client.authenticate_with_account(account)
    client.version.received(
        MarkReceivedVersionInput(
            version_id=version_id, project_id=project_id, source_application="specklepy"
        )
    )
