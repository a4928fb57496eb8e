"""One scanner for secrets in text: what the registry refuses to publish, what it redacts in uploaded
logs, and what ``lair doctor --bundle`` redacts before a bundle goes to a public issue.

:data:`RULES` (published text: recipes, notes, reasons, report documents):

- detect-secrets' regex plugins (AWS, GitHub, GitLab, Slack, Stripe, JWT, private keys, OpenAI,
  PyPI, npm, SendGrid, Twilio, ...), their patterns run directly over the whole text (one C-level
  pass each): detect-secrets' ``scan_line`` rewrites process-wide settings on every call (not safe
  under a threaded server), and its ``analyze_string`` yields a pattern's first group (only ``ghp``
  of a GitHub token), which cannot locate or redact the whole token;
- formats it lacks: Hugging Face ``hf_``, GitHub ``github_pat_``, bare ``sk-`` keys, Google
  ``AIza`` keys, lair's API tokens, a private key's whole block (the plugin matches its first line);
- a URL's password (``scheme://user:PASSWORD@host``, the user may be empty as in Redis URLs);
- the value of a flag named like a secret (``--api-key V``, ``--api_key=V``, ``--key``, ``--auth``,
  ``--token``, ``--password``, ``--hf-token``, ``--openai-api-key``...), also as the next item of a
  TOML or JSON array (``"--api-key", "V"``).

A value that is a placeholder (``{API_KEY}``, ``$API_KEY``, ``<key>``, ``***``) or a path is none;
a flag's value has a letter and a digit (``--key server.pem``, ``--auth none`` are not secrets).

:data:`LOG_RULES` adds, for logs and bundles only, credentials of any format by what stands before
them: ``Bearer <credential>`` and ``NAME_TOKEN=<value>``-style assignments (a recipe has placeholders
there, which these would not flag, but its keys and prose could).

:func:`redact` is the one redaction: each hit's span becomes ``[REDACTED:<kind>]`` (or the caller's
mark), overlapping spans merged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

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

__all__ = [
    "LOG_RULES",
    "RULES",
    "SECRET_FLAGS",
    "Hit",
    "Rule",
    "hits",
    "is_secret_flag",
    "mark_kind",
    "redact",
]

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
_NOT_PLACEHOLDER = r"(?![{$<*\[/.~])"
"""A value's first character: not a placeholder (``{X}``, ``$X``, ``<x>``, ``***``), a mark already
written (``[REDACTED...``) or a path."""
SECRET_FLAGS = (
    r"(?:api[-_]?key|api[-_]token|access[-_]token|auth[-_]token|token|key|auth|password|passwd|secret)"
)
"""The last word of a flag whose value is a secret (``--hf-token``, ``--openai-api-key`` end so)."""
_FLAG_NAME = re.compile(rf"--(?:[A-Za-z0-9]+[-_])*?{SECRET_FLAGS}", re.IGNORECASE)


def is_secret_flag(arg: str) -> bool:
    """Whether ``arg`` (``--api-key``, or the flag of ``--api-key=V``) is a flag whose value is a secret."""
    return bool(_FLAG_NAME.fullmatch(arg.split("=", 1)[0]))


OWN: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Hugging Face Token", re.compile(r"hf_[A-Za-z0-9]{30,}")),
    ("GitHub Token", re.compile(r"github_pat_[A-Za-z0-9_]{40,}")),
    ("API key (sk-...)", re.compile(r"sk-[A-Za-z0-9_-]{20,}")),
    ("Google API Key", re.compile(r"AIza[0-9A-Za-z_-]{35}")),
    ("lair API token", re.compile(r"lair_[A-Za-z0-9_-]{40,}")),
    (
        "Private Key",  # the whole block: a body of at most 16 KiB without "-----" (one pass)
        re.compile(
            r"BEGIN[A-Z ]{0,40} PRIVATE KEY(?: BLOCK)?-----"
            r"(?:(?:[A-Za-z0-9+/=\s:,.]|-(?!----)){0,16384}-----END[A-Z ]{0,40} PRIVATE KEY(?: BLOCK)?-----)?"
        ),
    ),
    (
        "URL password",  # scheme://user:PASSWORD@host; anchored on "://", a literal the scan jumps to
        re.compile(rf"://[^\s:/?#@\"']*:(?P<v>{_NOT_PLACEHOLDER}[^\s/?#@\"']{{1,256}})@"),
    ),
    (
        "secret flag value",  # --api-key V, --api_key=V, "--api-key", "V"
        re.compile(
            rf"--(?<![A-Za-z0-9]--)(?:[A-Za-z0-9]+[-_])*?{SECRET_FLAGS}(?:=|\s+|[\"']\s*,\s*[\"'])"
            rf"(?P<v>{_NOT_PLACEHOLDER}(?=[^\s\"',;]*\d)(?=[^\s\"',;]*[A-Za-z])[^\s\"',;]{{6,}})",
            re.IGNORECASE,
        ),
    ),
)
_WORDS = ("TOKEN", "KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS")
_SECRET_WORD = "(?:" + "|".join(v for w in _WORDS for v in (w, w.title(), w.lower())) + ")"
"""The last word of a secret's name in its usual cases (case-sensitive: a literal set scans faster)."""
LOG_ONLY: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Bearer credential", re.compile(r"\b[Bb]earer\s+(?P<v>[A-Za-z0-9._~+/=-]{16,})")),
    (
        "secret assignment",  # HF_TOKEN=..., "api_key": "...": a value with letters and digits
        re.compile(
            rf"(?<![A-Za-z0-9]){_SECRET_WORD}\b\s*[\"']?\s*[=:]\s*[\"']?"
            r"(?P<v>(?=[^\s\"',;]*\d)(?=[^\s\"',;]*[A-Za-z])[A-Za-z0-9][^\s\"',;)}\]]{7,})"
        ),
    ),
)


@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern[str]
    valid: Callable[[str], bool] | None = None


def _plugin_rules(plugin: RegexBasedDetector) -> Iterator[Rule]:
    valid = JwtTokenDetector.is_formally_valid if isinstance(plugin, JwtTokenDetector) else None
    for pattern in plugin.denylist:
        yield Rule(str(plugin.secret_type), pattern, valid)


RULES: tuple[Rule, ...] = tuple(r for p in PLUGINS for r in _plugin_rules(p)) + tuple(
    Rule(kind, pattern) for kind, pattern in OWN
)
LOG_RULES: tuple[Rule, ...] = RULES + tuple(Rule(kind, pattern) for kind, pattern in LOG_ONLY)


@dataclass(frozen=True)
class Hit:
    """One token in a text: its kind, where it is (the secret value's start: the column shown) and
    the span a redaction replaces. ``token`` is kept to compare findings, never to show."""

    kind: str
    at: int
    span: tuple[int, int]
    token: str


def _span(m: re.Match[str]) -> tuple[int, int]:
    """The secret's own span: the ``v`` group of lair's patterns; a plugin pattern's group when it is
    a value (a password, an AWS key), not a prefix (``ghp``); else the whole match."""
    if "v" in m.re.groupindex:
        return m.span("v")
    if m.re.groups and m.group(1) is not None and len(m.group(1)) >= 8:
        return m.span(1)
    return m.span()


def hits(text: str, rules: tuple[Rule, ...] = RULES) -> list[Hit]:
    """Every token in ``text``, by position."""
    found = []
    for rule in rules:
        for m in rule.pattern.finditer(text):
            if rule.valid is None or rule.valid(m.group()):
                span = _span(m)
                found.append(Hit(rule.kind, span[0], span, m.group()))
    return sorted(found, key=lambda h: (h.at, h.kind))


def _replace(text: str, found: list[Hit], mark: Callable[[str], str]) -> str:
    """``text`` with each hit's span (overlapping spans merged) replaced by ``mark(kind)``."""
    out, pos, i = [], 0, 0
    spans = sorted(found, key=lambda h: (h.span[0], -h.span[1]))
    while i < len(spans):
        start, end, kind = spans[i].span[0], spans[i].span[1], spans[i].kind
        i += 1
        while i < len(spans) and spans[i].span[0] < end:
            end = max(end, spans[i].span[1])
            i += 1
        start = max(start, pos)  # inside what was already replaced
        out += [text[pos:start], mark(kind)]
        pos = max(pos, end)
    return "".join([*out, text[pos:]])


def mark_kind(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def redact(text: str, rules: tuple[Rule, ...] = LOG_RULES, mark: Callable[[str], str] = mark_kind) -> str:
    """``text`` with every secret ``rules`` find replaced by ``mark(kind)``."""
    found = hits(text, rules)
    return _replace(text, found, mark) if found else text
