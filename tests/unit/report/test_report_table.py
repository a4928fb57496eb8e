"""The one table renderer: Markdown cells that cannot break their row, aligned text columns, and the
report page rendered through Jinja2 with the uploader's text escaped (parsed back with html.parser)."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

from lair.bench import BenchResult, CellResult
from lair.report.render import html_page, markdown
from lair.table import markdown_table, text_table


def test_markdown_cells_with_pipes_and_newlines_keep_their_row() -> None:
    out = markdown_table(["name", "note"], [["a|b", "line one\nline two"], ["c\\", "-"]])
    assert out == "| name | note |\n|---|---|\n| a\\|b | line one line two |\n| c\\\\ | - |"


def test_text_table_pads_columns_and_right_aligns_numbers() -> None:
    out = text_table(["context", "engine"], [["1,024", "vllm"], ["65,536", "llama.cpp"], ["12.5%", "x"]])
    assert out.splitlines() == [
        "context  engine",
        "  1,024  vllm",
        " 65,536  llama.cpp",
        "  12.5%  x",
    ]


class _Cells(HTMLParser):
    """Every table's cells as text, and every element name seen."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.tags: set[str] = set()
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _doc(run_name: str, model: str) -> dict[str, Any]:
    cell = CellResult(
        context=1024, concurrency=2, repeats=1, prompt_tokens=1027, ttft_ms_p50=100.0, ttft_ms_p90=110.0,
        prefill_tok_s=20_000.0, decode_tok_s_per_stream=50.5, decode_tok_s_aggregate=95.0,
        completion_tokens=64, cached_tokens=0, cache_hit=False, client_bound=False,
        output_length_ok=True, errors=0,
    )  # fmt: skip
    res = BenchResult("http://h:1", model, "a", "b", {}, [cell], server={})
    fp = {"cpu": {"model": "<img src=x onerror=alert(1)>", "count": 2}, "os": "Linux"}
    return {"run_name": run_name, "bench": res.as_dict(), "fingerprint": fp, "lair_version": "0"}


def test_the_report_page_escapes_the_uploaders_text_and_shows_the_speed_table() -> None:
    doc = _doc("<script>alert(1)</script>", "m|<b>odel</b>")
    page = html_page(doc)
    parsed = _Cells()
    parsed.feed(page)
    assert "script" not in parsed.tags and "img" not in parsed.tags and "b" not in parsed.tags
    assert "<script>alert(1)</script>: m|<b>odel</b>" in page.replace("&lt;", "<").replace("&gt;", ">")
    speed = parsed.tables[0]
    assert speed[1][:3] == ["1,024", "2", "1,027"] and speed[1][6:8] == ["50.5", "95.0"]
    assert "CPU: <img src=x onerror=alert(1)> x 2" in page.replace("&lt;", "<").replace("&gt;", ">")
    md = markdown(doc)
    assert "# <script>alert(1)</script>: m|<b>odel</b>" in md  # Markdown is text; the page is what escapes
    assert "| 1,024 | 2 | 1,027 |" in md
