"""Cubes in an S3-compatible object store, for servers of a shared state without a shared disk.

``--cube-dir s3://bucket/prefix`` keeps every cube's files under ``prefix/<table>/<build id>/`` in
the bucket; each server keeps a local copy under its data dir (``cubes/``), which it memory-maps as
ever. A build writes its files locally, uploads them, and only then commits the cube's index row
(`storage.cube_store.save`), so an index row always names complete objects; a server that has not
seen a cube yet downloads it into a temporary folder and renames it into place before mapping it.
Objects are only ever noisy, already charged arrays.

The client is boto3 (the ``s3`` extra): endpoint, region and credentials come from its standard
configuration (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, an instance role, ~/.aws), never from
Prima's own settings, and are never logged.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

from storage.database import StorageError

SCHEME = "s3://"


def is_remote(cube_dir: str | Path | None) -> bool:
    return cube_dir is not None and str(cube_dir).startswith(SCHEME)


class ObjectStore:
    """One bucket and key prefix holding every table's cube folders."""

    def __init__(self, url: str) -> None:
        bucket, _, prefix = url[len(SCHEME) :].partition("/")
        if not bucket:
            raise StorageError(f"{url!r} names no bucket: write s3://bucket or s3://bucket/prefix")
        try:
            import boto3
        except ImportError:
            raise StorageError(
                "cubes in an object store need the s3 extra: PRIMA_EXTRAS=s3 ./run.sh serve … "
                "(or pip install 'prima[s3]')"
            ) from None
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self._client: Any = boto3.client("s3")
        try:
            self._client.head_bucket(Bucket=bucket)
        except Exception as exc:  # the type only: botocore's text can name the endpoint
            raise StorageError(
                f"cannot reach the cube bucket {bucket!r} ({type(exc).__name__}): check the endpoint and "
                "credentials in the standard AWS settings (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, …)"
            ) from None

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def upload(self, folder: Path, table: str, build_id: str) -> None:
        """Every file of a finished local cube folder, before its index row is committed."""
        for path in sorted(folder.iterdir()):
            self._client.upload_file(str(path), self.bucket, self._key(table, build_id, path.name))

    def download(self, table: str, build_id: str, folder: Path) -> None:
        """A cube's files into ``folder`` (absent), through a temporary sibling renamed into place."""
        tmp = folder.with_name(f".fetch-{build_id}-{uuid.uuid4().hex[:8]}")
        tmp.mkdir(parents=True)
        try:
            keys = self._keys(self._key(table, build_id) + "/")
            if not keys:  # replaced and removed since the index was read: the caller reads it again
                raise FileNotFoundError(f"cube {build_id} of {table!r} is no longer stored")
            for key in keys:
                self._client.download_file(self.bucket, key, str(tmp / key.rsplit("/", 1)[1]))
            try:
                tmp.rename(folder)
            except OSError:  # another request fetched it meanwhile: same immutable files
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def builds(self, table: str) -> set[str]:
        """The build folders stored for ``table``."""
        base = self._key(table) + "/"
        return {key[len(base) :].split("/", 1)[0] for key in self._keys(base)}

    def remove(self, table: str, build_id: str | None = None) -> None:
        """One build's objects, or all of a table's."""
        keys = list(self._keys(self._key(table, *([build_id] if build_id else [])) + "/"))
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1,000 keys
            chunk = [{"Key": k} for k in keys[start : start + 1000]]
            self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True})

    def tables_with_prefix(self, prefix: str) -> list[str]:
        """Table folders whose name starts with ``prefix`` (a growing table's releases)."""
        base = self._key() + "/" if self.prefix else ""
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=base + prefix, Delimiter="/"
        )
        return [p["Prefix"][len(base) :].rstrip("/") for page in pages for p in page.get("CommonPrefixes", [])]

    def _keys(self, prefix: str) -> list[str]:
        pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]
