"""The infrastructure factory an application of ours is built with: our recorders and our
transcoder instead of eventsourcing's own persistence modules. The mapper is
eventsourcing's with our transcoder, sealing the facts events declare with their owner's
key (`sealed_facts.py`, ADR 0032) when given the keys."""

from __future__ import annotations

from typing import cast

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    Mapper,
    ProcessRecorder,
    TAggregateID,
    TrackingRecorder,
    Transcoder,
)
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder, SnapshotRecorder
from healthledger.adapters.persistence.eventstore.sealed_facts import (
    FactKeys,
    FactSealingMapper,
)
from healthledger.adapters.persistence.eventstore.transcoder import LedgerTranscoder


class LedgerInfrastructure(InfrastructureFactory[TrackingRecorder]):
    def __init__(
        self,
        recorder: LedgerRecorder,
        snapshot_recorder: SnapshotRecorder,
        facts: FactKeys | None = None,
    ) -> None:
        super().__init__(env={})
        self.recorder = recorder
        self.snapshot_recorder = snapshot_recorder
        # The owners' keys that seal and open events' facts (None: a ledger that stores
        # none, the webhook receiver's mirror; it reads them as erased).
        self.facts = facts

    def mapper(
        self,
        transcoder: Transcoder | None = None,
        mapper_class: type[Mapper[TAggregateID]] | None = None,
    ) -> Mapper[TAggregateID]:
        mapper = FactSealingMapper(transcoder=transcoder or self.transcoder())
        mapper.facts = self.facts
        # The ledger's aggregates are identified by UUIDs, the type the base names.
        return cast(Mapper[TAggregateID], mapper)

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
