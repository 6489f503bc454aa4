"""Transaction and group coordination, and the SQLite mirror. Imports ``exactly/storage/``, never ``exactly/app/``.

* ``transaction_state``       -- the transaction state machine (enum + allowed-previous table)
* ``transaction_log``         -- ``__transaction_state`` records;  ``producer_id_manager`` -- id blocks
* ``transaction_coordinator`` -- InitProducerId, AddPartitions/AddOffsets, EndTxn, markers, timeouts
* ``group_metadata``, ``group_coordinator`` -- consumer groups, offsets, KIP-447 fencing
* ``consumer_protocol``       -- the "consumer" protocol's subscription/assignment and range assignor
* ``offsets_log``             -- ``__consumer_offsets`` records;  ``schema`` -- Kafka's wire types
* ``internal_topics``         -- the two internal topics, declared once
* ``mirror_models``, ``mirror_db``, ``mirror`` -- the SQLite mirror (SQLAlchemy, Alembic, the writer)
"""
