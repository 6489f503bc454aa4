"""The process's open-file limit (``RLIMIT_NOFILE``), raised at start.

Every partition keeps files open (its active segment and indexes: about 3), and every
Kafka and HTTP connection is a descriptor. Linux starts a process with a soft limit
of often 1,024 and lets it raise that to the hard limit on its own, so the broker
does at start (Kafka's operators set 100,000 for the same reason); what the limits
of this broker could need beyond the hard limit is logged as a warning, once.
"""

from __future__ import annotations

import logging

from exactly.app.config import BrokerConfig

log = logging.getLogger(__name__)

#: descriptors each partition may hold (its .log, .index and .timeindex)
PER_PARTITION = 3
#: besides partitions and connections: the SQLite mirror, the worker process' pipes,
#: the data directory's lock, the loop's own, the libraries'
SPARE = 256


def needed(config: BrokerConfig) -> int:
    """Descriptors this broker's limits could need at once: ``exactly.max.partitions``
    partitions, ``max.connections`` Kafka connections and as many HTTP ones."""
    return PER_PARTITION * config.exactly_max_partitions + 2 * config.max_connections + SPARE


def raise_limit(config: BrokerConfig) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one; return the soft limit now in force."""
    try:
        import resource
    except ImportError:  # not a POSIX system: nothing to raise
        return -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, e)
    unlimited = soft == resource.RLIM_INFINITY
    if not unlimited and soft < needed(config):
        log.warning("the open-file limit is %d, but exactly.max.partitions=%d and max.connections=%d could need "
                    "%d descriptors: raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower those settings",
                    soft, config.exactly_max_partitions, config.max_connections, needed(config))
    return soft
