"""The infrastructure factory an application of ours is built with: our recorders and our
transcoder instead of eventsourcing's own persistence modules. The mapper is
eventsourcing's (`InfrastructureFactory.mapper`), with our transcoder."""

from __future__ import annotations

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    ProcessRecorder,
    TrackingRecorder,
    Transcoder,
)
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder, SnapshotRecorder
from healthledger.adapters.persistence.eventstore.transcoder import LedgerTranscoder


class LedgerInfrastructure(InfrastructureFactory[TrackingRecorder]):
    def __init__(self, recorder: LedgerRecorder, snapshot_recorder: SnapshotRecorder) -> None:
        super().__init__(env={})
        self.recorder = recorder
        self.snapshot_recorder = snapshot_recorder

    def transcoder(self) -> Transcoder:
        return LedgerTranscoder()

    def is_snapshotting_enabled(self) -> bool:
        return True

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        return self.snapshot_recorder if purpose == "snapshots" else self.recorder

    def application_recorder(self) -> ApplicationRecorder:
        return self.recorder

    def tracking_recorder(
        self, tracking_recorder_class: type[TrackingRecorder] | None = None
    ) -> TrackingRecorder:
        return self.recorder

    def process_recorder(self) -> ProcessRecorder:
        return self.recorder
