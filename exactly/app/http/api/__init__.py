"""The REST API under ``/v3`` (Confluent REST Proxy v3 where it exists, plus what no proxy
has: transactions over HTTP, faults, events, the audit): ``clusters.py`` is the root
blueprint the others nest in, ``models.py`` every request and response shape,
``route.py`` the one declaration of each route (its Flask rule, OpenAPI operation, needs
and answer model) and ``document.py`` the OpenAPI document derived from them."""
