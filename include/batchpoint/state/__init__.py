"""Keyed state: key groups and the state file format."""
