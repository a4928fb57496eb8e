"""A Hugging Face hub cache laid out as ``hf download REPO --repo-type dataset`` leaves it, without a
network: blobs named by their sha256, a snapshot folder of relative links, ``refs/main``. The INPUT
of offline data set tests (huggingface_hub's ``scan_cache_dir`` reads it as a cached repo).

    snap = write_hub_dataset(home / "hub", "openai/gsm8k", {"README.md": b"...", "main/test.parquet": data})
    tiny_gsm8k(home / "hub")  # openai/gsm8k, config main: three test problems, two train ones
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

__all__ = ["GSM8K_TEST", "GSM8K_TRAIN", "REVISION", "parquet_bytes", "tiny_gsm8k", "write_hub_dataset"]

REVISION = "e53f048856ff4f594e959d75785d2c2d37b678ee"
GSM8K_TEST = [
    ("Tom has 3 bags of 6 apples. How many apples?", "3 bags of 6 is 3*6 = 18 apples.\n#### 18"),
    ("A pen costs $2. What do 7 pens cost?", "7 pens cost 7*2 = $14.\n#### 14"),
    ("Ann reads 1,200 pages a week. How many in 2 weeks?", "2*1,200 = 2,400 pages.\n#### 2,400"),
]
GSM8K_TRAIN = [("What is 1 + 1?", "1 + 1 = 2\n#### 2"), ("What is 2 + 3?", "2 + 3 = 5\n#### 5")]
_README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
---
# gsm8k (three test problems, two few-shot ones)
"""


def parquet_bytes(columns: dict[str, list[str]]) -> bytes:
    """A Parquet file of string ``columns``, written by pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


def write_hub_dataset(hub: Path, repo: str, files: dict[str, bytes], revision: str = REVISION) -> Path:
    """``files`` (path in the repo -> bytes) as the cached data set ``repo``; returns the snapshot."""
    root = hub / ("datasets--" + repo.replace("/", "--"))
    snap = root / "snapshots" / revision
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snap / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    return snap


def _split(rows: list[tuple[str, str]]) -> bytes:
    return parquet_bytes({"question": [q for q, _ in rows], "answer": [a for _, a in rows]})


def tiny_gsm8k(hub: Path) -> Path:
    """``openai/gsm8k`` (config ``main``) with ``GSM8K_TEST`` and ``GSM8K_TRAIN`` in the hub cache."""
    files = {"README.md": _README.encode(), "main/train-00000-of-00001.parquet": _split(GSM8K_TRAIN)}
    files["main/test-00000-of-00001.parquet"] = _split(GSM8K_TEST)
    return write_hub_dataset(hub, "openai/gsm8k", files)
