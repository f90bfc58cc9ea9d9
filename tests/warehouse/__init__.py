"""Tests of ``abm_provider.warehouse``, a module each; the loads end to end are in ``tests/transfers``."""
