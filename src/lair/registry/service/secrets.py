"""Refuse secrets in the free text users publish: recipe TOML, revision notes, retraction reasons.

Known token formats come from detect-secrets' regex plugins (AWS, GitHub, GitLab, Slack, Stripe, JWT,
private keys, ...), plus lair's own patterns for formats it lacks (Hugging Face, bare ``sk-`` keys,
lair's API tokens, GitHub fine-grained PATs). The plugins' ``analyze_string`` is called directly:
detect-secrets' ``scan_line`` rewrites its process-wide settings on every call, which is not safe
under a threaded server. Keyword and entropy plugins are left out: recipes hold digests and
``API_KEY = "{API_KEY}"`` placeholders that they would flag.

A finding names the field, line, column and token kind, never the secret itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

from lair.errors import Issue, RegistryError

__all__ = ["redact", "refuse_secrets", "scan"]

PLUGINS: tuple[RegexBasedDetector, ...] = tuple(
    cls()
    for cls in (
        AWSKeyDetector,
        AzureStorageKeyDetector,
        BasicAuthDetector,
        DiscordBotTokenDetector,
        GitHubTokenDetector,
        GitLabTokenDetector,
        JwtTokenDetector,
        MailchimpDetector,
        NpmDetector,
        OpenAIDetector,
        PrivateKeyDetector,
        PypiTokenDetector,
        SendGridDetector,
        SlackDetector,
        SquareOAuthDetector,
        StripeDetector,
        TelegramBotTokenDetector,
        TwilioKeyDetector,
    )
)
# formats detect-secrets lacks, anchored on their prefixes
OWN: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Hugging Face Token", re.compile(r"hf_[A-Za-z0-9]{30,}")),
    ("GitHub Token", re.compile(r"github_pat_[A-Za-z0-9_]{40,}")),
    ("API key (sk-...)", re.compile(r"sk-[A-Za-z0-9_-]{20,}")),
    ("lair API token", re.compile(r"lair_[A-Za-z0-9_-]{40,}")),
)


def _values(line: str) -> Iterator[tuple[str, str]]:
    """(token, kind) of each token in one line."""
    for plugin in PLUGINS:
        for value in plugin.analyze_string(line):
            yield value, str(plugin.secret_type)
    for kind, pattern in OWN:
        for m in pattern.finditer(line):
            yield m.group(), kind


def _found(line: str) -> Iterator[tuple[int, str]]:
    """(column, kind) of each token in one line."""
    for value, kind in _values(line):
        yield line.find(value) + 1, kind


def redact(text: str) -> str:
    """``text`` with every known token replaced, for a form shown again after a refusal."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        for value, _ in sorted(_values(line), key=lambda v: -len(v[0])):
            lines[i] = lines[i].replace(value, "[secret removed]")
    return "\n".join(lines)


def scan(text: str, field: str) -> list[Issue]:
    """Every known token format in ``text``, located as ``field:line:col``."""
    issues = {(n, col, kind) for n, line in enumerate(text.splitlines(), 1) for col, kind in _found(line)}
    return [
        Issue(field, n, col, field, f"a {kind} is written here", code="secret")
        for n, col, kind in sorted(issues)
    ]


def refuse_secrets(**fields: str) -> None:
    """Raise 422 ``secret`` naming each field and line that holds a token."""
    issues = [i for name, text in fields.items() for i in scan(text, name)]
    if issues:
        where = "; ".join(f"{i.file}:{i.line}:{i.col}: {i.message}" for i in issues)
        hint = 'use a secret placeholder: {API_KEY} with [placeholders.API_KEY] type = "secret"'
        raise RegistryError(422, "secret", f"a secret was found: {where}", hint=hint, errors=issues)
