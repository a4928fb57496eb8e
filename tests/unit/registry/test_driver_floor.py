"""The NVIDIA driver floor from the image's CUDA version: one case per tag pattern the registry reads,
and the recipe's ``CUDA_VERSION`` env when the tag names none. Every expected driver is copied by hand
from NVIDIA's "CUDA Toolkit and Corresponding Driver Versions" table (Linux x86_64, toolkit driver) in
the CUDA Toolkit Release Notes, not from the bundled data file."""

from __future__ import annotations

import pytest

from lair.recipe import load_text
from lair.registry.service.driver_floor import UNKNOWN, driver_floor


def _recipe(image: str, cuda_env: str | None = None) -> str:
    env = f'\n[env]\nCUDA_VERSION = "{cuda_env}"\n' if cuda_env else ""
    return f'engine = "vllm"\ndocker_image = "{image}"\nmodel = "m"\n{env}'


@pytest.mark.parametrize(
    ("image", "cuda", "driver"),
    [
        # cudaXX.Y[.Z], cuda-XX.Y, cuda_vXX.Y
        ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "12.4", "550.54.14"),  # 12.4 GA
        ("example/engine:v1-cuda-12.6.2", "12.6.2", "560.35.03"),  # 12.6 Update 2
        ("example/engine:cuda_v12.1", "12.1", "530.30.02"),  # 12.1 GA
        # cuXYZ
        ("vllm/vllm-openai:v0.10.1-cu128", "12.8", "570.26"),  # 12.8 GA
        ("example/engine:2.1-cu118", "11.8", "520.61.05"),  # 11.8 GA
        # XX.Y.Z-devel / -runtime / -base / -cudnn (NVIDIA's own base images)
        ("nvidia/cuda:12.8.1-devel-ubuntu22.04", "12.8.1", "570.124.06"),  # 12.8 Update 1
        ("nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04", "12.4.1", "550.54.15"),  # 12.4 Update 1
        ("nvidia/cuda:13.0.2-runtime-ubuntu24.04", "13.0.2", "580.95.05"),  # 13.0 Update 2
        ("nvidia/cuda:11.7.1-base-ubuntu20.04", "11.7.1", "515.48.07"),  # 11.7 Update 1
    ],
)
def test_floor_from_each_tag_pattern(image: str, cuda: str, driver: str) -> None:
    floor = driver_floor(load_text(_recipe(image)))
    assert (floor.cuda, floor.driver, floor.basis) == (cuda, driver, "image tag")
    assert floor.text == f">= {driver} (CUDA {cuda}, from the image tag)"


@pytest.mark.parametrize(
    "image",
    [
        "example/engine:cu1290",  # not cuXYZ: a longer number
        "cuda12.4/engine:latest",  # the repository's name is not the tag
        "example/engine:v0.9.0",
    ],
)
def test_tags_that_name_no_cuda_version(image: str) -> None:
    floor = driver_floor(load_text(_recipe(image)))
    assert (floor.driver, floor.cuda, floor.text) == (None, None, UNKNOWN)
    assert floor.reason == f"the image tag of {image!r} names no CUDA version"


def test_floor_from_the_cuda_version_env() -> None:
    floor = driver_floor(load_text(_recipe("vllm/vllm-openai:v0.9.0", "12.4.1")))
    assert (floor.cuda, floor.driver, floor.basis) == ("12.4.1", "550.54.15", "CUDA_VERSION")
    assert floor.minor_compat_driver == "525.60.13"  # CUDA 12.x minor-version compatibility
    floor = driver_floor(load_text(_recipe("example/engine:latest", "12.9.1")))
    assert (floor.cuda, floor.driver) == ("12.9.1", "575.57.08")  # 12.9 Update 1


def test_the_tag_wins_over_the_env() -> None:
    floor = driver_floor(load_text(_recipe("example/engine:v1-cu129", "12.4.1")))
    assert (floor.cuda, floor.driver, floor.basis) == ("12.9", "575.51.03", "image tag")


def test_a_cuda_version_the_table_lacks_is_unknown_with_the_reason() -> None:
    floor = driver_floor(load_text(_recipe("example/engine:latest", "10.2")))
    assert (floor.driver, floor.cuda, floor.text) == (None, "10.2", UNKNOWN)
    assert floor.reason == "CUDA 10.2 (from the CUDA_VERSION) is not in the bundled table"
