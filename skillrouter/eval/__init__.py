"""Routing metrics."""
