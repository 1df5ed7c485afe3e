"""docs/backup-and-restore.md's commands, as the drill runs them: each ```sh block of the page follows a
`<!-- step: NAME -->` line, and `Runbook.run(NAME, **variables)` runs that block with bash, its variables
($PGDATA, $BACKUP_CONFIG, $RESTORE_TO...) set, `broker-ledger` being the tests' interpreter's console
script. So the page's commands are the ones the drill proves, not a copy of them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "backup-and-restore.md"
# blocks may be indented (in a list item): the block's lines are then dedented
SH_BLOCK = re.compile(r"^[ \t]*```sh\n(.*?)^[ \t]*```", re.S | re.M)
STEP_BLOCK = re.compile(r"^[ \t]*<!-- step: ([a-z-]+) -->\n[ \t]*```sh\n(.*?)^[ \t]*```", re.S | re.M)
CRON_BLOCK = re.compile(r"^```cron\n(.*?)^```", re.S | re.M)
STEP_SECONDS = 300


def doc_text() -> str:
    return DOC.read_text()


def steps(text: str | None = None) -> dict[str, str]:
    """Each step's name and its block's text."""
    found = STEP_BLOCK.findall(text if text is not None else doc_text())
    return {name: textwrap.dedent(block) for name, block in found}


def sh_blocks(text: str | None = None) -> list[str]:
    return [textwrap.dedent(block) for block in SH_BLOCK.findall(text if text is not None else doc_text())]


def cron_commands(text: str | None = None) -> list[str]:
    """The commands of the page's crontab lines (after the five time fields and the user)."""
    commands = []
    for block in CRON_BLOCK.findall(text if text is not None else doc_text()):
        for line in block.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(" ".join(line.split()[6:]))
    return commands


@dataclass
class Runbook:
    """Runs the page's steps with `env` (the cluster's and the repository's variables) and keeps which ran."""

    env: dict[str, str]
    ran: list[str] = field(default_factory=list)

    def run(self, name: str, **variables: str) -> str:
        """Runs step `name`; its standard output. A failed step fails the test with what it said."""
        block = steps()[name]
        env = {**os.environ, **self.env, **variables}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=STEP_SECONDS,
            check=False,
        )
        self.ran.append(name)
        if done.returncode != 0:
            pytest.fail(
                f"step {name!r} of {DOC.name} exited with {done.returncode}:\n{block}\n"
                f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}",
                pytrace=False,
            )
        return done.stdout
