"""Accounts: validation and batching, the sources they come from, the add/remove run and the list sync."""
