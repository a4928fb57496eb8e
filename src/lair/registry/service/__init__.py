"""The registry's service layer: everything the site does, with no HTTP in it.

Functions take a SQLAlchemy ``Connection`` (Core, not ORM sessions) and return plain data; errors
are the typed subclasses of :class:`lair.errors.RegistryError` (``NotFound``, ``Invalid``, ``Forbidden``...),
each with a stable code; the web layer maps each class to its HTTP status. The web routes and the
CLI are thin wrappers over these modules:

    publish      create a recipe (revision 1), add revisions, users, the bundled examples (seed)
    read         a recipe with its latest revision, measurements and history; one revision
    search       full-text search, filters, sorting and cursor pagination
    document     the JSON document of a recipe (the page's twin)
    page         the view model of a recipe page, section by section in the order of the seed page
    chart        the server-rendered SVG chart of decode and prefill against context
    driver       the NVIDIA driver floor from an image's CUDA version (bundled NVIDIA table)
    placeholders a recipe rendered with a user's placeholder values (secrets as env references)
    fitting      lair.fit for a catalog GPU, when the model's facts are known
"""
