"""The recipe registry: the recipe site and its JSON API (``lair serve``).

    db/        SQLAlchemy 2 models, engines (SQLite WAL / PostgreSQL), numbered Alembic migrations
    service/   what the site does, with no HTTP in it: publish, read, search, pages, placeholders, fit
    web/       thin Starlette routes + Jinja2 templates over the service layer, a response cache
    static.py  ``lair registry export-static``: the API and pages as files with the same URLs

Never imports the launcher, the runners, the planner, the hooks or the inventory (import-linter
contract in pyproject.toml): a registry host does not run recipes.
"""
