"""Hugging Face hub staging: refs -> snapshot -> relative symlinks into blobs -> per-file mounts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lair.errors import LaunchError
from lair.plan import Stage, Target, plan
from lair.plan.mounts import hub_mount, manifest_volume_args, parse_manifest, staging_script
from lair.recipe import Mount, load_text


def _hub(tmp_path: Path) -> Path:
    """A hub repo as huggingface_hub writes it: blobs by hash, snapshot files as relative links."""
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "blobs").mkdir()
    rev = "0123abcd"
    (repo / "refs" / "main").write_text(rev)
    snap = repo / "snapshots" / rev
    (snap / "sub").mkdir(parents=True)
    for name, data in {"config.json": "{}", "model.safetensors": "W", "sub/tok.json": "T"}.items():
        blob = repo / "blobs" / f"sha-{name.replace('/', '_')}"
        blob.write_text(data)
        rel = os.path.relpath(blob, (snap / name).parent)
        (snap / name).symlink_to(rel)
    (repo / "snapshots" / "old").mkdir()  # another revision, not referenced
    return repo


def test_hub_mount_is_recognised_with_an_optional_ref() -> None:
    h = hub_mount(Mount(host="/nas/hub/models--org--tiny", container="/model/"))
    assert h is not None and (h.repo_dir, h.ref, h.container) == (
        "/nas/hub/models--org--tiny",
        "main",
        "/model",
    )
    h2 = hub_mount(Mount(host="/nas/hub/models--org--tiny@v2", container="/m"))
    assert h2 is not None and h2.ref == "v2" and h2.repo_dir.endswith("models--org--tiny")
    assert hub_mount(Mount(host="/nas/hub", container="/hub")) is None


def test_staging_script_writes_real_files_per_mount(tmp_path: Path) -> None:
    repo = _hub(tmp_path)
    manifest = tmp_path / "m.txt"
    h = hub_mount(Mount(host=str(repo), container="/model"))
    assert h is not None
    subprocess.run(["sh", "-c", staging_script([h], str(manifest))], check=True)
    pairs = parse_manifest(manifest.read_text())
    assert [c for _, c in pairs] == ["/model/config.json", "/model/model.safetensors", "/model/sub/tok.json"]
    for host, _ in pairs:
        assert Path(host).is_file() and not Path(host).is_symlink() and "/blobs/" in host
    assert manifest_volume_args(pairs[:1]) == ["-v", f"{pairs[0][0]}:/model/config.json:ro"]


def test_staging_fails_loudly_on_a_missing_ref(tmp_path: Path) -> None:
    repo = _hub(tmp_path)
    h = hub_mount(Mount(host=f"{repo}@nope", container="/model"))
    assert h is not None
    r = subprocess.run(
        ["sh", "-c", staging_script([h], str(tmp_path / "m.txt"))], capture_output=True, text=True
    )
    assert r.returncode != 0 and "no snapshot" in r.stderr and not (tmp_path / "m.txt").exists()


def test_bad_manifest_line_is_located() -> None:
    with pytest.raises(LaunchError, match=r"m\.txt:2: expected"):
        parse_manifest("/a\t/b\nrelative /c\n", where="m.txt")
    assert parse_manifest("# c\n\n/a\t/b\n") == [("/a", "/b")]


def test_plan_stages_hub_mounts_instead_of_a_dir_mount(tmp_path: Path) -> None:
    repo = _hub(tmp_path)
    r = load_text(
        f'engine = "vllm"\ndocker_image = "i:1"\nmodel = "/model"\n'
        f'[[extra_mounts]]\nhost = "{repo}"\ncontainer = "/model"\nread_only = true\n'
    )
    p = plan(r, [Target(name="a", address="10.0.0.1", rank=0)], run_id="h1")
    node = p.nodes[0]
    staging = node.stage(Stage.STAGE_MOUNTS)
    assert len(staging) == 1 and staging[0].script and str(repo) in staging[0].script
    start = node.stage(Stage.START)[0]
    assert start.manifest == f"{node.workdir}/hub-mounts.txt"
    assert start.argv is not None and not any(str(repo) in a for a in start.argv)
