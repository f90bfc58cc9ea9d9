"""Helpers shared by more than one test folder, each written once.

Importable as ``support.<module>`` from any test (``tests/`` is on ``sys.path`` because
``tests/conftest.py`` lives there), so no test imports another folder's ``conftest``:

- :mod:`support.export_files`: the export type the tests use, its CSV header and key, row builders,
  CSV writing, the download's XCom, and the independent expectation a loaded table is compared with;
- :mod:`support.warehouses`: the one registry of test warehouses (DuckDB, PostgreSQL, MariaDB, the
  generic path on SQLite): the servers, each suite's isolation, one helper per question a test asks
  a database, and the fixtures;
- :mod:`support.cloud_warehouses`: the Snowflake and BigQuery emulators, as servers of their own;
- :mod:`support.tasks`: the emulator as ``abm_default`` and the slice of a task context operators read;
- :mod:`support.dag_runs`: a DAG built in a test, run with ``dag.test()``, and what its tasks pushed;
- :mod:`support.abm_connections`: an ABM connection and the hooks' request pipeline, with no server;
- :mod:`support.processes`: a task run in a child process, killed at a chosen point or measured.
"""
