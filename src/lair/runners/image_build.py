"""Small local Docker images in seconds, without a registry: the running Python interpreter (its
stdlib and the shared libraries ``ldd`` lists), ``/bin/sh``, and chosen Python packages of this
environment under ``/opt/lair-py`` (on ``PYTHONPATH``), streamed as a tar into ``docker import``.

    build_python_image("lair-test/engine:1", packages=["lair", "xllamacpp"])
    docker run --rm lair-test/engine:1 python3 -m lair.engines.xllamacpp_server --help

The image runs ``python3`` and ``sh``; it has no package manager. ``extra_paths`` are copied at the
same path (their ELF files are ldd-scanned too).
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

__all__ = ["ENGINE_PACKAGES", "PY_DIR", "build_python_image", "image_exists", "load_into_podman"]

PY_DIR = "/opt/lair-py"
ENGINE_PACKAGES = (
    "lair",
    "xllamacpp",
    "pydantic",
    "pydantic_core",
    "typing_extensions",
    "annotated_types",
    "typing_inspection",
    "tomlkit",
    "yaml",
    "platformdirs",
)
"""What an image needs to run ``python -m lair.engines.xllamacpp_server`` and lair's recipe model."""

SO_RE = re.compile(r"\.so(\.|$)")
SKIP_DIRS = {
    "site-packages",
    "__pycache__",
    "test",
    "tests",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
}
BASE_FILES = ("/bin/sh", "/usr/bin/env", "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/hosts")


def image_exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def build_python_image(
    tag: str,
    *,
    packages: Sequence[str] = (),
    extra_paths: Sequence[str | Path] = (),
    env: dict[str, str] | None = None,
) -> str:
    """Build ``tag`` with ``docker import`` and return it. ``packages`` are top-level import names
    of this environment (a package folder or a single module)."""
    exe = Path(os.path.realpath(sys.executable))
    members = _interpreter_files(exe) + [Path(p) for p in BASE_FILES if Path(p).exists()]
    members += [Path(p) for p in extra_paths]
    staged = {f"{PY_DIR}/{src.name}": src for src in (_package_path(n) for n in packages)}
    libs = _shared_libs([exe, *_elf_files(members), *_elf_files(staged.values())])
    changes = [
        f"ENV PATH={exe.parent}:/usr/local/bin:/usr/bin:/bin",
        f"ENV PYTHONPATH={PY_DIR}",
        'CMD ["python3"]',
        *(f"ENV {k}={v}" for k, v in (env or {}).items()),
    ]
    argv = ["docker", "import", *(a for c in changes for a in ("--change", c)), "-", tag]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None
    try:
        _write_tar(proc.stdin, sorted(set(members) | set(libs)), staged, exe)
        proc.stdin.close()
    except BrokenPipeError:
        pass  # docker import gave up: its stderr says why
    err = proc.stderr.read()
    proc.stderr.close()
    if proc.wait() != 0:
        raise RuntimeError(f"docker import {tag} failed: {err.decode(errors='replace')[-1000:]}")
    return tag


def load_into_podman(tag: str) -> str:
    """Copy the Docker image ``tag`` into podman's storage (``docker save | podman load``, about 2 s
    for the engine image) and return ``tag``; podman stores it as ``localhost/<tag>`` and finds it by
    ``tag`` too."""
    save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    load = subprocess.run(["podman", "load"], stdin=save.stdout, capture_output=True, text=True)
    assert save.stdout is not None and save.stderr is not None
    save.stdout.close()
    err = save.stderr.read().decode(errors="replace")
    save.stderr.close()
    if save.wait() != 0 or load.returncode != 0:
        raise RuntimeError(f"docker save {tag} | podman load failed: {err[-500:]}{load.stderr[-1000:]}")
    return tag


def _write_tar(out: IO[bytes], files: Sequence[Path], staged: dict[str, Path], exe: Path) -> None:
    """Every file once (arcname -> source): staged packages first, so a library that ldd found
    inside a staged package is not stored twice."""
    entries: dict[str, Path] = {}
    inside_staged = tuple(str(src) + "/" for src in staged.values())
    for dest, src in staged.items():
        for f in _walk(src):
            entries.setdefault(dest.lstrip("/") + str(f)[len(str(src)) :], f)
    for path in files:
        for f in _walk(path):
            if not str(f).startswith(inside_staged):
                entries.setdefault(str(f).lstrip("/"), f)
    with tarfile.open(fileobj=out, mode="w|", dereference=True) as tar:
        for arcname, src in entries.items():
            tar.add(str(src), arcname=arcname, recursive=False)
        _symlink(tar, "usr/bin/python3", str(exe))


def _interpreter_files(exe: Path) -> list[Path]:
    paths = {Path(sysconfig.get_path("stdlib"))}  # not platstdlib: in a venv that is the venv
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlib = sysconfig.get_config_var("LDLIBRARY")
    shared = [Path(libdir) / ldlib] if libdir and ldlib and ldlib.endswith(".so") else []
    return [exe, *sorted(paths), *[p for p in shared if p.exists()]]


def _package_path(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"package {name!r} is not importable here")
    origin = Path(spec.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def _walk(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    for root, dirs, files in os.walk(path, followlinks=True):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("config-")]
        for f in files:
            if not f.endswith(".pyc"):
                yield Path(root) / f


def _elf_files(paths: Iterable[Path]) -> list[Path]:
    out = []
    for p in paths:
        for f in _walk(p):
            if SO_RE.search(f.name) or (f.is_file() and os.access(f, os.X_OK) and _is_elf(f)):
                out.append(f)
    return out


def _is_elf(f: Path) -> bool:
    try:
        with f.open("rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def _shared_libs(elfs: Sequence[Path]) -> list[Path]:
    """Every library ``ldd`` resolves for ``elfs`` plus the dynamic loader."""
    found: set[Path] = set()
    for chunk in range(0, len(elfs), 200):
        res = subprocess.run(["ldd", *map(str, elfs[chunk : chunk + 200])], capture_output=True, text=True)
        found.update(p for p in map(_ldd_path, res.stdout.splitlines()) if p is not None)
    return sorted(found)


def _ldd_path(line: str) -> Path | None:
    """The library in one ``ldd`` line (``libx.so => /lib/libx.so (0x..)`` or ``/lib64/ld-linux...``)."""
    parts = line.split()
    if "=>" in parts:
        i = parts.index("=>") + 1
        return Path(parts[i]) if i < len(parts) and parts[i].startswith("/") else None
    if parts and parts[0].startswith("/") and not parts[0].endswith(":"):  # "FILE:" headers
        return Path(parts[0])
    return None


def _symlink(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    tar.addfile(info, io.BytesIO(b""))
