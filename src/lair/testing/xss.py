"""XSS payloads for the registry's pages (script tags, event handlers, ``javascript:`` links, SVG, markdown
and unicode tricks) and the check that none of them created anything in a page rendered by Chromium."""

from __future__ import annotations

from typing import Any

__all__ = ["PAYLOADS", "created"]

_BASE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    "<svg onload=alert(3)>",
    "<svg><script>alert(4)</script></svg>",
    '"><script>alert(5)</script>',
    "'><img src=x onerror=alert(6)>",
    "<iframe src=javascript:alert(7)>",
    '<a href="javascript:alert(8)">x</a>',
    "javascript:alert(9)",
    "<body onload=alert(10)>",
    "<input autofocus onfocus=alert(11)>",
    "<details open ontoggle=alert(12)>",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(13)>",
    "<object data=javascript:alert(14)>",
    "<embed src=javascript:alert(15)>",
    "[x](javascript:alert(16))",
    "![x](javascript:alert(17))",
    "<scr<script>ipt>alert(18)</script>",
    "<SCRIPT SRC=//evil.example/x.js></SCRIPT>",
    '<img src="x" onerror="alert(20)">',
    '<div style="background:url(javascript:alert(21))">',
    '<svg><a xlink:href="javascript:alert(22)"><text>x</text></a></svg>',
    "<marquee onstart=alert(23)>",
    "<video><source onerror=alert(24)>",
    "<audio src=x onerror=alert(25)>",
    "\u003cscript\u003ealert(26)\u003c/script\u003e",
    "＜script＞alert(27)＜/script＞",
    "<scr\u0000ipt>alert(28)</scr\u0000ipt>",
    "\u202e<script>alert(29)</script>",
    "<img src=x onerror=&#97;&#108;&#101;&#114;&#116;(30)>",
    '<a href="&#106;avascript:alert(31)">x</a>',
    "<form action=javascript:alert(32)><button>x</button></form>",
    "<isindex action=javascript:alert(33) type=image>",
    "<base href=javascript:alert(34)//>",
    "<link rel=import href=data:text/html,<script>alert(35)</script>>",
    '<meta http-equiv=refresh content="0;url=javascript:alert(36)">',
    "{{7*7}}<script>alert(37)</script>",
    "${alert(38)}",
    "</textarea><script>alert(39)</script>",
    "</title><script>alert(40)</script>",
    "</pre><script>alert(41)</script>",
    "<!--<script>alert(42)</script>-->",
    "<![CDATA[<script>alert(43)</script>]]>",
    "<img src=x:alert(44) onerror=eval(src)>",
    "<svg><animate onbegin=alert(45) attributeName=x dur=1s>",
    "<xss onpointerover=alert(46) style=display:block>x</xss>",
    "`<img src=x onerror=alert(47)>`",
    "<<script>script>alert(48)<</script>/script>",
    "data:text/html;base64,PHNjcmlwdD5hbGVydCg0OSk8L3NjcmlwdD4=",
    "<a href=# onclick=alert(50)>click</a>",
    "<style>@import 'javascript:alert(51)';</style>",
    '<img srcset="x 1w" onerror=alert(52)>',
]
PAYLOADS = [p.replace("\u0000", "") for p in _BASE]


def created(page: Any) -> int:
    """Elements (or attributes) a payload would have created inside the page's main content."""
    return int(
        page.evaluate(
            "() => document.querySelectorAll('main script, main iframe, main object, main embed, main img, "
            "main svg:not(.chart), main video, main audio, main marquee, main xss, main math, "
            # the page's own <details> (the derived command, the model facts, a row's certificate); a
            # payload's has none of those classes
            "main details:not(.derived-command):not(.model-facts-fields):not(.certificate), main [ontoggle], "
            "main base, main meta, main link, main style, main [onerror], main [onload], main [onclick], "
            'main a[href^="javascript" i]\').length'
        )
    )
