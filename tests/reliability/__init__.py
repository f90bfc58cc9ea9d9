"""Reliability and security tests: the fault matrix, secret hygiene, and load (issue 7)."""
