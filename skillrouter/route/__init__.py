"""Serving a grid cell's router to agents (``python -m skillrouter.route``): a room of its own on top of the
stages (it reads their cache entries and loads models as they do); nothing in ``pipeline/`` imports it."""
