"""The list sync's SQL, one module per concern, written once for every dialect.

- ``binding``: :class:`~.binding.Sql`, a statement with its values kept beside their places, bound in
  the parameter style the state database's dialect declares;
- ``tables``: the state tables as one database's SQL (:class:`~.tables.StateSql`) and a run's work
  tables, temporary where the dialect declares ``temporary_tables``;
- ``staging``: staging a source, the rules in SQL and the comparison with the members;
- ``plan``: writing a run's plan, its rejects and its row;
- ``recording``: recording the service's answers, the run log and its trimming;
- ``runs``: reading runs, plans and counts back.

The engine's modules (``plan``, ``staging``, ``recording``, ``sending``, ``summary``) hold no SQL
text: they call these and run what they return through
:class:`~abm_provider.accounts.sync.database.StateDatabase`. What a warehouse spells its own way is
its dialect's (quoting, types, casts, regular expressions, MD5, the numbered copy of a query), or
chosen here by what its :class:`~abm_provider.warehouse.dialects.capabilities.Capabilities` declare.
The state tables' own ``CREATE TABLE`` statements sit beside their names
(:meth:`~abm_provider.accounts.sync.state.StateTables.create_sql`).
"""
