"""Renderers consume events only: one for people (stderr), one for machines (JSONL on stdout)."""
