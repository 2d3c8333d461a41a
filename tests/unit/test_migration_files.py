"""The revision files of each migration line are named in the order the revisions apply
(`step_NN_r<revision>_<slug>.py`): the folder reads as the schema's history, while the
revision ids, which are stamped in every database, never change."""

from __future__ import annotations

import re

import pytest
from alembic.script import ScriptDirectory
from healthledger.adapters.persistence.engine.migrating import (
    MIRROR,
    SERVICE,
    MigrationLine,
    alembic_config,
    next_step,
    version_files,
)

NAME = re.compile(r"step_(\d{2})_r(\w+?)_\w+\.py")


@pytest.mark.parametrize("line", [SERVICE, MIRROR], ids=["service", "mirror"])
def test_revision_files_are_named_in_chain_order(line: MigrationLine) -> None:
    scripts = ScriptDirectory.from_config(alembic_config(line))
    # walk_revisions goes from head to base; the chain has no branches.
    chain = list(reversed(list(scripts.walk_revisions())))
    names = [script.path.rsplit("/", 1)[-1] for script in chain]
    assert names == version_files(line)
    for step, (name, script) in enumerate(zip(names, chain, strict=True), start=1):
        matched = NAME.fullmatch(name)
        assert matched is not None, name
        assert int(matched.group(1)) == step
        # The name carries the revision id it holds (ids are not in chain order).
        assert script.revision.endswith(matched.group(2))


@pytest.mark.parametrize("line", [SERVICE, MIRROR], ids=["service", "mirror"])
def test_a_new_revision_is_named_as_the_next_step(line: MigrationLine) -> None:
    template = alembic_config(line).get_main_option("file_template")
    assert next_step(line) == len(version_files(line)) + 1
    assert template == f"step_{next_step(line):02d}_r%(rev)s_%(slug)s"
