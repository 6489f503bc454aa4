"""The REST API under ``/v3`` (Confluent REST Proxy v3 where it exists, plus what no proxy
has: transactions over HTTP, faults, events, the audit): ``clusters.py`` is the root
blueprint the others nest in, ``models.py`` every request and response shape,
``document.py`` the OpenAPI document derived from them."""
