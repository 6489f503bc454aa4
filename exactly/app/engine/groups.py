"""Groups: the group coordinator as the faces see it
(``exactly/coordinator/group_coordinator.py`` says what each request answers): its
requests as they are, and frozen views of its groups (``views.py``)."""

from __future__ import annotations

import uuid

from exactly.app.engine.views import GroupView
from exactly.coordinator.group_coordinator import GroupCoordinator


class Groups:
    """The consumer groups' requests, and views of the groups."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        #: the coordinator itself, for the engine's own read models
        self.coordinator = coordinator
        # its requests, as they are
        self.join_group = coordinator.join_group
        self.sync_group = coordinator.sync_group
        self.heartbeat = coordinator.heartbeat
        self.leave_group = coordinator.leave_group
        self.commit_offsets = coordinator.commit_offsets
        self.fetch_offsets = coordinator.fetch_offsets
        self.delete_group = coordinator.delete_group
        self.delete_offsets = coordinator.delete_offsets
        self.consumer_group_heartbeat = coordinator.consumer_group_heartbeat

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The topic a consumer group request names by id (None: no topic has it)."""
        return self.coordinator.io.topic_name(topic_id)

    def assignor_of(self, group_id: str) -> str:
        """The server-side assignor a consumer group's next target assignment uses."""
        group = self.coordinator.describe(group_id)
        consumer = group.consumer if group is not None else None
        return self.coordinator.consumer.assignor_for(consumer) if consumer is not None else ""

    def describe_group(self, group_id: str) -> GroupView | None:
        group = self.coordinator.describe(group_id)
        return GroupView.of(group) if group is not None else None

    def list_groups(self) -> list[GroupView]:
        """Every group the coordinator holds (Dead ones included), by group id."""
        return [GroupView.of(g) for _, g in sorted(self.coordinator.groups.items())]
