"""Hooks of the ABM provider.

Import them from :mod:`abm_provider.hooks.abm` (``AbmHook``, ``AbmAsyncHook``); this package imports
nothing itself so that importing the provider stays cheap.
"""
