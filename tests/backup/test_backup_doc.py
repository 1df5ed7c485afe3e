"""docs/backup-and-restore.md's commands are the drill's: every ```sh block of the page is a step the drill
runs (`<!-- step: NAME -->` before it, see tests/backup/runbook.py), and every crontab line runs a command of
one of those blocks. Pure file checks; that each step runs and passes is the drill's
(`test_restore_drill.py` asserts it ran them all)."""

from __future__ import annotations

from tests.backup.runbook import cron_commands, sh_blocks, steps


def test_every_command_block_of_the_page_is_a_step_of_the_drill() -> None:
    blocks, named = sh_blocks(), steps()
    assert len(named) == len(blocks), (
        "a ```sh block without `<!-- step: NAME -->` before it (or a name twice)"
    )
    assert sorted(named.values()) == sorted(blocks)


def test_the_crontab_runs_the_commands_the_drill_runs() -> None:
    lines = {line.strip() for block in steps().values() for line in block.splitlines()}
    commands = cron_commands()
    assert commands, "the page's schedule has no crontab lines"
    assert [command for command in commands if command not in lines] == []
