"""Helpers shared by more than one test folder, each written once.

Importable as ``support.<module>`` from any test (``tests/`` is on ``sys.path`` because
``tests/conftest.py`` lives there), so no test imports another folder's ``conftest``:

- :mod:`support.export_files`: the export CSV header and key, row builders, CSV writing, the
  download's XCom, and the independent expectation a loaded table is compared with;
- :mod:`support.warehouses`: the loader tests' warehouses (DuckDB, PostgreSQL, the generic path
  on PostgreSQL and SQLite) and their fixtures;
- :mod:`support.postgres`: the test PostgreSQL at 127.0.0.1:5432 and a database of a suite's own;
- :mod:`support.tasks`: the emulator as ``abm_default`` and the slice of a task context operators read;
- :mod:`support.processes`: a task run in a child process, killed at a chosen point or measured.
"""
