"""Tests of ``abm_provider.common``, one module per source module."""
