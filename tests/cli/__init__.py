"""Tests of the command line, one file per command module of `eagle_probe/cli/`."""
