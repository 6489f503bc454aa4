"""The ``exactly`` command: one module per subcommand (``main.py`` parses and dispatches;
``acls``, ``audit``, ``events``, ``faults``, ``users``), and the clients they reach a
running broker with -- over the Kafka port (``admin_connection.py``) or its HTTP API
(``http_api_client.py``)."""
