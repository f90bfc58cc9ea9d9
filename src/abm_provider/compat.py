"""The Airflow names that moved between Airflow 3.1 and 3.3, each imported from where it lives.

Every other module of the provider imports these names from here, so the supported range
(``apache-airflow>=3.1.2``, which ``make test`` installs and runs at 3.1.2, the newest 3.1, the
newest 3.2 and the pinned 3.3) is one file's concern:

- the task exceptions are in ``airflow.sdk.exceptions`` from 3.2, in ``airflow.exceptions`` before;
- the configuration is ``airflow.sdk.configuration.conf`` from 3.2, ``airflow.configuration.conf``
  before; reading the other would silently skip ``[abm]`` settings in ``airflow.cfg``;
- ``AssetOrTimeSchedule`` and ``CronTriggerTimetable`` are exported by ``airflow.sdk`` from 3.2, and
  live in ``airflow.timetables`` in 3.1. DAG files may import them from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # type checkers read the pinned Airflow's names
    from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowSensorTimeout,
        AirflowSkipException,
    )
else:
    try:  # Airflow 3.2 and later
        from airflow.sdk.exceptions import (
            AirflowException,
            AirflowFailException,
            AirflowSensorTimeout,
            AirflowSkipException,
        )
    except ImportError:  # Airflow 3.1
        from airflow.exceptions import (
            AirflowException,
            AirflowFailException,
            AirflowSensorTimeout,
            AirflowSkipException,
        )
    try:
        from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable
    except ImportError:  # Airflow 3.1
        from airflow.timetables.assets import AssetOrTimeSchedule
        from airflow.timetables.trigger import CronTriggerTimetable


def airflow_conf() -> Any:
    """Airflow's configuration parser, imported at call time so that importing the provider stays light."""
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # Airflow 3.1
        from airflow.configuration import conf
    return conf


__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AssetOrTimeSchedule",
    "CronTriggerTimetable",
    "airflow_conf",
]
