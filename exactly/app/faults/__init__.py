"""Faults on purpose: what a test of an exactly-once application throws at its clients.

``fault.py`` is the model and the registry (``Broker.faults``), ``shapes.py`` where a
request keeps what a fault matches, ``inject.py`` what the Kafka listener does with a
request a fault fires on, ``events.py`` the presets (a coordinator away, a pause, a
full disk). The HTTP resource, the CLI and the console page call the registry.
"""

from exactly.app.faults.fault import Action, Fault, FaultError, Faults, FaultSpec, Match, declare

__all__ = ["Action", "Fault", "FaultError", "FaultSpec", "Faults", "Match", "declare"]
