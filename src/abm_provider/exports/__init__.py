"""Export files: the schedule check, the checked download and its archive, the stream to the warehouse.

Parquet conversion (:mod:`.parquet`) and the pipe between threads (:mod:`.pipe`) live here too.
"""
