"""The embedded producer and consumer: Kafka's client API, in-process, no network."""
