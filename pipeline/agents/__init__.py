"""Faust agents of the worker and their batch logic."""
