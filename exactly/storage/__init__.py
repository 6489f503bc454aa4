"""Bytes on disk, in Kafka's formats. Nothing here imports ``exactly/coordinator/`` or ``exactly/app/``.

Every file's layout, with worked examples, is in ``docs/formats.md``. One module per
file type or concept; each module's docstring is its format's spec:

* ``record_batch``  -- v2 record batches (header, records, control records, CRC-32C)
* ``compression``   -- gzip / snappy / lz4 / zstd codecs;  ``varint`` -- zigzag varints
* ``segment``       -- one ``.log`` and its indexes
* ``offset_index``, ``time_index``, ``txn_index`` -- ``.index``, ``.timeindex``, ``.txnindex``
* ``producer_state`` -- the sequence/epoch rules;  ``producer_snapshot`` -- ``.snapshot`` files
* ``partition_log`` -- append, read, LSO, high watermark, recovery, retention of a partition
* ``log_cleaner``   -- transaction-aware compaction;  ``read_committed`` -- the consumer-side reader
* ``log_manager``   -- the data directory;  ``checkpoint`` -- Kafka's text checkpoints
* ``filenames``     -- every file name;  ``atomic_file`` -- crash-safe whole-file writes
* ``checked_file``  -- the version + CRC-32C framing of whole files the broker owns
* ``background``    -- maintenance as steps of jobs, so the owner's thread never waits on the disk
* ``errors``        -- one exception per Kafka error code (every layer raises these)
"""
