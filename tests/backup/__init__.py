"""Backups and point-in-time restore: the restore drill and its runbook (docs/backup-and-restore.md)."""
