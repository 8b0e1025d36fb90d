"""Test support shared by several test packages (real harness CLIs, stand-in model API)."""
