"""Artifact stores for tests: a directory, and an S3 bucket on moto's S3 server on loopback.

`dir_artifact_url` and `s3_artifact_url` give an `ArtifactStoreUrl`: the `TOOLFLEET_ARTIFACT_URL` of a
store of the test's module alone, and `env`, the variables every process using it needs (the S3 one's
credentials and region; none for a directory), already set in this process while the fixture lasts.
A test that needs a store of its own takes `under(name)`: the same store under a prefix of its own.

The S3 server (`python -m moto.server`) is started once per test process and stopped at its end; each
module gets a bucket of its own. Loaded by tests/conftest.py for every test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import boto3  # type: ignore[import-untyped]
import httpx
import pytest

from tests._ports import free_port
from tests._processes import reap
from tests._waiting import wait_for

__all__ = ["S3_ENV", "ArtifactStoreUrl", "MotoServer", "dir_artifact_url", "moto_server", "s3_artifact_url"]

# What a process needs to reach moto's server: any credentials do; no profile, config file or
# instance metadata of the caller's is read.
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
# The caller's variables that would change which credentials or endpoint a process uses: removed.
_AWS_REMOVED = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
)


@dataclass(frozen=True)
class ArtifactStoreUrl:
    """An artifact store for a test: its `TOOLFLEET_ARTIFACT_URL` and the variables its processes need."""

    url: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def is_s3(self) -> bool:
        return self.url.startswith("s3://")

    def under(self, name: str) -> ArtifactStoreUrl:
        """The same store under the prefix (or subdirectory) `name`: a store of one test's own."""
        parts = urlsplit(self.url)
        return ArtifactStoreUrl(
            urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{name}")), dict(self.env)
        )

    def worker_env(self) -> dict[str, str]:
        """`env` with `TOOLFLEET_ARTIFACT_URL`: what a worker or `toolfleet serve` using the store gets."""
        return {**self.env, "TOOLFLEET_ARTIFACT_URL": self.url}


@dataclass(frozen=True)
class MotoServer:
    """moto's S3 server on loopback: where it answers, and the process."""

    endpoint_url: str
    process: subprocess.Popen[bytes]

    def create_bucket(self, name: str) -> None:
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
            region_name=S3_ENV["AWS_DEFAULT_REGION"],
        )
        try:
            client.create_bucket(Bucket=name)
        finally:
            client.close()


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """moto's S3 server, started for the test process; the AWS variables of `S3_ENV` set in this
    process (the caller's own credentials, profile and endpoint put aside) until it ends."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = MotoServer(f"http://127.0.0.1:{port}", process)
    saved = {name: os.environ.get(name) for name in (*S3_ENV, *_AWS_REMOVED)}
    try:

        def answers() -> bool:
            assert process.poll() is None, f"moto's server exited:\n{log_path.read_text(errors='replace')}"
            try:
                return httpx.get(f"{server.endpoint_url}/", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(answers, timeout_s=30, what=f"moto's S3 server at {server.endpoint_url}")
        for name in _AWS_REMOVED:
            os.environ.pop(name, None)
        os.environ.update(S3_ENV)
        yield server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        reap(process)


@pytest.fixture(scope="module")
def s3_artifact_url(moto_server: MotoServer, request: pytest.FixtureRequest) -> ArtifactStoreUrl:
    """An S3 artifact store of the module's own: `s3://<bucket>/artifacts?endpoint_url=<moto>`, its
    bucket just made, and the AWS variables its processes need."""
    bucket = _bucket_name(request.module.__name__)
    moto_server.create_bucket(bucket)
    return ArtifactStoreUrl(f"s3://{bucket}/artifacts?endpoint_url={moto_server.endpoint_url}", dict(S3_ENV))


@pytest.fixture(scope="module")
def dir_artifact_url(tmp_path_factory: pytest.TempPathFactory) -> ArtifactStoreUrl:
    """A directory artifact store of the module's own: `file:///<a temporary directory>`."""
    directory: Path = tmp_path_factory.mktemp("artifacts")
    return ArtifactStoreUrl(directory.as_uri())


def _bucket_name(module: str) -> str:
    """A valid, unique S3 bucket name (3-63 lowercase letters, digits, hyphens) for a module."""
    stem = re.sub(r"[^a-z0-9]+", "-", module.rsplit(".", 1)[-1].lower()).strip("-")[:40] or "tests"
    return f"{stem}-{uuid.uuid4().hex[:12]}"
