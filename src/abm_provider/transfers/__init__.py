"""Transfers: moving a downloaded export into a SQL warehouse."""
