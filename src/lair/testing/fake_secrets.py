"""Fake secrets of every shape lair must redact, and ordinary text it must leave alone.

Each value is built from pieces at import time, so no file holds a literal a secret scanner (a
forge's push protection, detect-secrets in a pre-commit hook) would flag; none of them is or was
ever a real credential.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

__all__ = ["ORDINARY", "SHAPES", "Shape"]


@dataclass(frozen=True)
class Shape:
    """A line as a log, a command or a config would hold it, and the secret inside it."""

    line: str
    secret: str
    published: bool = True
    """Refused in published text too (False: a log-only shape, found by what stands before it)."""


def _b64(doc: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")


_JWT = ".".join(
    [_b64({"alg": "HS256", "typ": "JWT"}), _b64({"sub": "4242", "name": "Fake"}), "q" + "Wd3Rt9Yz" * 5 + "k"]
)
_KEY_BODY = "MIIEow" + "IBAAKCAQEAx7Vq" * 4
_PW = "Tr0ub4dor" + "-" + "Gh7Kq2"

SHAPES: dict[str, Shape] = {
    "AWS access key id": Shape("aws_access_key_id = AK" + "IAQ7ZT3MX9PL2VRC4D", "AK" + "IAQ7ZT3MX9PL2VRC4D"),
    "GitHub ghp_": Shape(
        "git clone https://github.com/o/r using gh" + "p_" + "R4nd0mT3st" * 3 + "Xy9Q12",
        "gh" + "p_" + "R4nd0mT3st" * 3 + "Xy9Q12",
    ),
    "GitLab glpat-": Shape(
        "GITLAB= glp" + "at-" + "xK9mPqR2sT4vW6yZ8aBc", "glp" + "at-" + "xK9mPqR2sT4vW6yZ8aBc"
    ),
    "Slack xoxb-": Shape(
        "webhook xo" + "xb-" + "123456789012-1234567890123-" + "AbCd" * 6,
        "xo" + "xb-" + "123456789012-1234567890123-" + "AbCd" * 6,
    ),
    "Stripe sk_live_": Shape(
        "billing sk" + "_live_" + "4eC39HqLyjWD" * 2, "sk" + "_live_" + "4eC39HqLyjWD" * 2
    ),
    "JWT": Shape(f"cookie session={_JWT}; Path=/", _JWT),
    "Google AIza": Shape(
        "maps key AI" + "za" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
        "AI" + "za" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    ),
    "OpenAI sk-": Shape(
        "OPENAI_BASE=x key sk" + "-proj-" + "Ab3dEf6hIj9kLm2nOp5q", "sk" + "-proj-" + "Ab3dEf6hIj9kLm2nOp5q"
    ),
    "Hugging Face hf_": Shape(
        "downloading with h" + "f_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
        "h" + "f_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    ),
    "private key block": Shape(
        "-----BEGIN RSA PRIVATE" + " KEY-----\n" + _KEY_BODY + "\n-----END RSA PRIVATE" + " KEY-----",
        _KEY_BODY,
    ),
    "database URL password": Shape(
        f"LAIR_REGISTRY_DB=postgresql+psycopg://lair:{_PW}@db.internal:5432/lair", _PW
    ),
    "Redis URL password": Shape(f"rate limits in redis://:{_PW}x@cache:6379/0", _PW + "x"),
    "--api-key VALUE": Shape("vllm serve m --api-key Zq8xLm2Pv9Rt4Wn7 --port 8000", "Zq8xLm2Pv9Rt4Wn7"),
    "--api_key VALUE": Shape("server --api_key Xy12Ab34Cd56Ef78", "Xy12Ab34Cd56Ef78"),
    "--key VALUE": Shape("llama-server --key Qw3rTy7uI9oP1aS2", "Qw3rTy7uI9oP1aS2"),
    "--auth=VALUE": Shape("proxy --auth=Ab12Cd34Ef56Gh78", "Ab12Cd34Ef56Gh78"),
    "--hf-token VALUE": Shape('args = ["--hf-token", "Mn4bV6cX8zL1kJ3h"]', "Mn4bV6cX8zL1kJ3h"),
    "Bearer credential": Shape("Authorization: Bearer 0a1b2c3d4e5f6a7b8c9d", "0a1b2c3d4e5f6a7b8c9d", False),
    "NAME_TOKEN=value": Shape("export WANDB_TOKEN=9f8e7d6c5b4a3f2e1d", "9f8e7d6c5b4a3f2e1d", False),
}
"""Shape name -> where it stands and the secret value that must not survive redaction."""

ORDINARY: tuple[str, ...] = (
    "sha256:" + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "ghcr.io/ggml-org/llama.cpp:server-cuda@sha256:"
    + "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
    "vllm/vllm-openai:v0.6.3.post1",
    "meta-llama/Llama-3.1-8B-Instruct",
    "vllm serve m --max-num-batched-tokens 8192 --kv-cache-dtype fp8 --tokenizer hf-internal/tok",
    "llama-server --key-file /etc/ssl/server.key --api-key {API_KEY} --token $HF_TOKEN",
    'args = ["--api-key", "{API_KEY}"]',
    "INFO api_key=None tokenizer=/models/tok max_num_batched_tokens=8192",
    "postgresql+psycopg://lair@db.internal:5432/lair and redis://cache:6379/0",
    "http://127.0.0.1:8000/v1/chat/completions",
)
"""Text that holds no secret: digests, image tags, model names, flags, placeholders, URLs."""
