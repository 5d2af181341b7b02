"""Keyed state: key groups, the state file format and its keys, and state schema evolution."""
