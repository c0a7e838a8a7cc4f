"""JSON Schemas shipped as package data (read with importlib.resources)."""
