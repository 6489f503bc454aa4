"""Security: who is asking (``principal``; proven by SASL: ``sasl_plain``, ``scram``
over the users' ``credentials``, on TLS from ``tls``) and what they may do (``acl``, the
ACL model with Kafka's wire codes; ``authorizer``, Kafka's StandardAuthorizer rules).

Nothing here knows the engine or the faces: the engine keeps the authorizer and the
credentials (both durable in ``__cluster_metadata``, ``exactly/coordinator/cluster_metadata.py``)
and the faces ask it, through the engine, before any side effect.
"""
