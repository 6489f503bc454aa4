"""Apache Kafka beside Exactly: Kafka's own broker, Java client, tools and Streams, from
Maven Central (``pom.xml`` pins the version), as judges of Exactly's compatibility.

``jars.py`` resolves the jars, ``real_kafka.py`` runs the broker and the tools,
``conftest.py`` has the fixtures (``real_kafka``, once per test process, and
``kafka_and_exactly``, which runs a test against each broker), and the ``test_*.py``
files are the scenarios (see docs/testing.md, "Kafka beside Exactly")."""
