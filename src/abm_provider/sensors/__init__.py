"""Sensors of the ABM provider."""
