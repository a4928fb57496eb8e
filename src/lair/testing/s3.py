"""An S3-protocol server of a test's own: moto's standalone server (``moto_server``, from
``moto[server]``) on a chosen address and a free port, to stop and start again.

    with s3_server() as s3:                 # or s3_server(host="10.231.40.1")
        s3.create_bucket("reports")
        env = s3.env                        # LAIR_REGISTRY_S3_ENDPOINT and fake AWS credentials
        s3.stop()                           # SIGKILL: connections refused, as when the store dies
        s3.start()                          # the same port, and the objects it held before

moto keeps its objects in memory. So that a restart keeps them, as a real store keeps them on its
disk, the server records every request it answers to a file (moto's recorder) and :meth:`S3Server.start`
replays that file into the new process before it returns.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lair.testing.registry import free_port

__all__ = ["ACCESS_KEY", "SECRET_KEY", "S3Server", "s3_server"]

ACCESS_KEY = "lair-test-access"
SECRET_KEY = "lair-test-secret"  # moto checks no signature: any pair is accepted


def _moto_server() -> list[str]:
    found = Path(sys.executable).with_name("moto_server")
    if found.exists():
        return [str(found)]
    on_path = shutil.which("moto_server")
    if on_path is None:
        raise RuntimeError("moto_server not found: pip install 'moto[server]'")
    return [on_path]


class S3Server:
    def __init__(self, root: Path, host: str, port: int) -> None:
        self.root, self.host, self.port = root, host, port
        self.recording = root / "recording.jsonl"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What a ``lair serve --blobs s3://...`` needs to reach this server."""
        return {
            "LAIR_REGISTRY_S3_ENDPOINT": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self, timeout: float = 30.0) -> None:
        """Start the server, wait (with a deadline) until it answers, replay what it held."""
        env = {
            **os.environ,
            "MOTO_ENABLE_RECORDING": "true",
            "MOTO_RECORDER_FILEPATH": str(self.recording),
        }
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the server's own output, closed with it
        self.proc = subprocess.Popen(
            [*_moto_server(), "-H", self.host, "-p", str(self.port)],
            env=env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self._wait_ready(timeout)
        if self.recording.exists() and self.recording.stat().st_size:
            self._api("replay-recording")

    def _api(self, action: str) -> bytes:
        req = urllib.request.Request(f"{self.endpoint}/moto-api/recorder/{action}", method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            return bytes(r.read())

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                tail = (self.root / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"moto_server exited with {self.proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=2) as r:
                    json.loads(r.read())
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        """SIGKILL, as a crash would: open connections are cut, new ones refused."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.proc = None

    def client(self) -> object:
        """A boto3 S3 client on this server (for tests to look behind the registry)."""
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)  # type: ignore[attr-defined]

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object of ``bucket`` under ``prefix``: name -> bytes."""
        c: object = self.client()
        out: dict[str, bytes] = {}
        pages = c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)  # type: ignore[attr-defined]
        for page in pages:
            for o in page.get("Contents", []):
                out[o["Key"]] = c.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()  # type: ignore[attr-defined]
        return out


@contextmanager
def s3_server(host: str = "127.0.0.1", port: int | None = None) -> Iterator[S3Server]:
    """A fresh server, started; stopped and its folder removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="lair-s3-"))
    server = S3Server(root, host, port or free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
