"""The sign-in providers lair knows (GitHub, Hugging Face) and the names of their settings.

Plain data, no imports: ``lair serve --help`` builds its OAuth flags from this table without loading
pydantic or authlib (:mod:`lair.registry.oauth` reads the settings and models them).
"""

from __future__ import annotations

__all__ = ["PROVIDERS", "env_name"]

PROVIDERS: dict[str, dict[str, str]] = {
    "github": {
        "title": "GitHub",
        "authorize_url": "https://github.com/login/oauth/authorize",
        "token_url": "https://github.com/login/oauth/access_token",
        "userinfo_url": "https://api.github.com/user",
        "scope": "read:user",
        "token_auth": "client_secret_post",  # GitHub's documented way: the secret in the form body
    },
    "huggingface": {
        "title": "Hugging Face",
        "issuer": "https://huggingface.co",
        "scope": "openid profile",
        "token_auth": "client_secret_basic",
    },
}


def env_name(provider: str, field: str) -> str:
    """The environment variable of one provider setting: ``LAIR_REGISTRY_GITHUB_CLIENT_ID``."""
    return f"LAIR_REGISTRY_{provider.upper()}_{field.upper()}"
