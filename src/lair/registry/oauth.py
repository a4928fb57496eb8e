"""Sign-in providers (GitHub, Hugging Face): their OAuth client settings, read from the environment.

For provider ``P`` (``GITHUB``, ``HUGGINGFACE``) the server reads ``LAIR_REGISTRY_P_CLIENT_ID`` and the client
secret from ``LAIR_REGISTRY_P_CLIENT_SECRET`` or the file named by ``LAIR_REGISTRY_P_CLIENT_SECRET_FILE``
(never from argv). ``LAIR_REGISTRY_P_AUTHORIZE_URL``, ``_TOKEN_URL`` and ``_USERINFO_URL`` replace the
public endpoints (GitHub Enterprise, a test provider); Hugging Face is OpenID Connect and finds its
endpoints in ``LAIR_REGISTRY_HUGGINGFACE_ISSUER`` + ``/.well-known/openid-configuration``. A provider
without a client id is off. The secret is a :class:`~pydantic.SecretStr`: it prints as ``**********``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from lair.errors import ConfigError
from lair.registry.providers import PROVIDERS, env_name

__all__ = ["PROVIDERS", "Provider", "env_name", "load_providers", "state_key"]

ProviderName = Literal["github", "huggingface"]


class Provider(BaseModel):
    """One configured sign-in provider."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ProviderName = Field(description="the provider: github or huggingface")
    title: str = Field(description="its name on the sign-in button")
    client_id: str = Field(min_length=1, description="the OAuth app's client id")
    client_secret: SecretStr = Field(description="the OAuth app's client secret")
    scope: str = Field(description="scopes asked for")
    token_auth: Literal["client_secret_basic", "client_secret_post"] = Field(
        description="how the client authenticates at the token endpoint"
    )
    authorize_url: str | None = Field(None, description="authorization endpoint (else from discovery)")
    token_url: str | None = Field(None, description="token endpoint (else from discovery)")
    userinfo_url: str | None = Field(None, description="user endpoint (else from discovery)")
    issuer: str | None = Field(None, description="OpenID Connect issuer, whose discovery document is read")

    @property
    def oidc(self) -> bool:
        return self.issuer is not None

    def register_kwargs(self) -> dict[str, Any]:
        """Arguments for authlib's ``OAuth.register``; PKCE (S256) on every provider."""
        kw: dict[str, Any] = {
            "name": self.name,
            "client_id": self.client_id,
            "client_secret": self.client_secret.get_secret_value(),
            "authorize_url": self.authorize_url,
            "access_token_url": self.token_url,
            "client_kwargs": {
                "scope": self.scope,
                "code_challenge_method": "S256",
                "token_endpoint_auth_method": self.token_auth,
            },
        }
        if self.issuer:
            kw["server_metadata_url"] = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        if self.userinfo_url:
            kw["userinfo_endpoint"] = self.userinfo_url
        return kw


def _secret(env: Mapping[str, str], name: str) -> str:
    value, file = env.get(env_name(name, "client_secret")), env.get(env_name(name, "client_secret_file"))
    if value and file:
        raise ConfigError(
            f"{env_name(name, 'client_secret')} and {env_name(name, 'client_secret_file')} are both set",
            hint="keep one",
        )
    if file:
        try:
            value = Path(file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{name} client secret file {file}: {exc.strerror}") from None
    if not value:
        raise ConfigError(
            f"{env_name(name, 'client_id')} is set but the {name} client secret is not",
            hint=f"set {env_name(name, 'client_secret_file')} to a file holding it (or --{name}-secret-file)",
        )
    return value


def _url(env: Mapping[str, str], name: str, field: str, default: str | None) -> str | None:
    url = env.get(env_name(name, field)) or default
    if url is not None and not url.startswith(("https://", "http://")):
        raise ConfigError(f"{env_name(name, field)}: {url!r} is not an http(s) URL")
    return url


def _provider(env: Mapping[str, str], name: str) -> Provider:
    d = PROVIDERS[name]
    urls = {f: _url(env, name, f, d.get(f)) for f in ("authorize_url", "token_url", "userinfo_url")}
    issuer = _url(env, name, "issuer", d.get("issuer")) if "issuer" in d else None
    return Provider(
        name=name,
        title=d["title"],
        client_id=env[env_name(name, "client_id")],
        client_secret=SecretStr(_secret(env, name)),
        scope=d["scope"],
        token_auth=d["token_auth"],
        issuer=issuer,
        **urls,
    )


def load_providers(env: Mapping[str, str]) -> dict[str, Provider]:
    """The providers with a client id in ``env``; a :class:`ConfigError` for a missing or doubled secret."""
    return {name: _provider(env, name) for name in PROVIDERS if env.get(env_name(name, "client_id"))}


def state_key(providers: Mapping[str, Provider]) -> str:
    """The key that signs the short-lived sign-in state cookie, derived from the client secrets: every
    process configured with the same providers shares it, and nobody without a secret can forge it."""
    h = hashlib.sha256(b"lair oauth state\0")
    for p in sorted(providers.values(), key=lambda p: p.name):
        h.update(p.name.encode() + b"\0" + p.client_secret.get_secret_value().encode() + b"\0")
    return h.hexdigest()
