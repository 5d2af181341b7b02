"""Keyed state: key groups, the state file format, and state schema evolution."""
