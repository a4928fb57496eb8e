"""Run reports: a folder next to the recipe holding the recipe as run, results, raw timings, engine
logs, a machine fingerprint and human reports; plus ``show`` and ``compare``.

    path = write_run_report("recipes/demo.toml", "demo", bench_result, engine_logs, values)
    doc = load_report(path)
    print(markdown(doc))
    print(compare_text(compare(load_report(a), load_report(b))))
"""

from lair.report.compare import compare, compare_text
from lair.report.folder import REPORT_FILES, load_report, report_dir, write_run_report
from lair.report.render import html_page, markdown

__all__ = [
    "REPORT_FILES",
    "compare",
    "compare_text",
    "html_page",
    "load_report",
    "markdown",
    "report_dir",
    "write_run_report",
]
