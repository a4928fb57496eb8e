"""The import graph of lair has no circle, in-function and type-checking imports included (grimp, the
graph import-linter checks its contracts on): a module never imports, however indirectly, a module
that imports it. Found by Tarjan's strongly connected components over the direct imports."""

from __future__ import annotations

import sys

import grimp


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for m in sorted(graph.modules):
            if m not in index:
                visit(m)
    finally:
        sys.setrecursionlimit(limit)
    return out


def test_a_circle_is_found_where_there_is_one() -> None:
    g = grimp.ImportGraph()
    for m in ("p.a", "p.b", "p.c", "p.d"):
        g.add_module(m)
    g.add_import(importer="p.a", imported="p.b")
    g.add_import(importer="p.b", imported="p.c")
    g.add_import(importer="p.c", imported="p.a")
    g.add_import(importer="p.c", imported="p.d")
    assert _circles(g) == [["p.a", "p.b", "p.c"]]


def test_lair_has_no_import_circle() -> None:
    assert _circles(grimp.build_graph("lair", cache_dir=None)) == []  # no cache written into the tree
