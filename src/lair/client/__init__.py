"""The registry's client: what ``lair login|search|pull|push|submit`` call (stdlib HTTP only).

    Credentials.load()            URL + token: LAIR_REGISTRY / LAIR_TOKEN, else the stored login
    Credentials.save()            ``<config dir>/registry.json``, mode 0600
    Client(creds).me()            GET  /api/v1/me (who the token acts as, its scopes)
    Client(creds).efficiencies()  GET  /api/v1/efficiencies (verified rows as % of their roofline)
    Client(creds).search(...)     GET  /api/v1/recipes
    Client(creds).recipe(slug)    GET  /api/v1/recipes/<slug>.json
    Client(creds).recipe_toml()   GET  /api/v1/recipes/<slug>.toml | /revisions/<n>.toml
    Client(creds).push(...)       POST /api/v1/recipes | /api/v1/recipes/<slug>/revisions
    Client(creds).submit(data)    POST /api/v1/reports (a report folder as .tar.gz; ?replicates=ROW)
    Client(creds).report(id)      GET  /api/v1/reports/<id> (summary, fingerprint)
    Client(creds).report_file()   GET  /reports/<id>/files/<name> (a raw file)
    pack_report(folder)           the .tar.gz of a report folder

Every failure is a :class:`lair.errors.RegistryError` with the server's status, code, message and
reasons (status 0 when the registry cannot be reached). The client never imports the launcher.
"""

from lair.client import submitted
from lair.client.api import Client, Credentials, pack_report

__all__ = ["Client", "Credentials", "pack_report", "submitted"]
