"""Each migration's message is one line: the master logs it at start-up ("Running upgrade A -> B,
<message>"), and `det master logs` shows one line per record, so a message that wraps would break
the log into lines without a timestamp or level."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from controlplane.master.db.migrate import alembic_config


def test_every_migration_message_is_one_line():
    scripts = ScriptDirectory.from_config(alembic_config(None))
    wrapped = {rev.revision: rev.doc for rev in scripts.walk_revisions() if "\n" in rev.doc}
    assert wrapped == {}, "make the docstring's first paragraph one line"
