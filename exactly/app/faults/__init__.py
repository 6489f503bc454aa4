"""Faults on purpose: what a test of an exactly-once application throws at its clients.

``fault.py`` is the model and the registry (``Broker.faults``), ``events.py`` the
presets (a coordinator away, a pause, a full disk). The HTTP resource, the CLI and the
console page call the registry; the Kafka listener applies it
(``exactly/app/kafka/fault_injection.py``, with ``fault_shapes.py``: where a request keeps
what a fault matches).
"""

from exactly.app.faults.fault import Action, Fault, FaultError, Faults, FaultSpec, Match, declare

__all__ = ["Action", "Fault", "FaultError", "FaultSpec", "Faults", "Match", "declare"]
