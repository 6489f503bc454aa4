"""The admin console at ``/``: server-rendered pages that htmx refreshes in place.
``blueprint.py`` is what the views share; one module per area (``views.py`` the overview,
transactions, partitions and groups; ``topics``, ``security``, ``faults``, ``events``,
``groups``, ``audit``); the templates and static files are ``exactly/web/``."""
