"""Operators of the ABM provider.

Import them from their modules (``abm_provider.operators.account_lists``,
``abm_provider.operators.exports``); this package imports nothing so that loading one operator does
not pull in the others' dependencies.
"""
