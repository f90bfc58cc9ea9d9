"""The hostile suite's fixtures (network guard, connection factory, log capture), for its controls."""

from ..hostile.conftest import (  # noqa: F401 - fixtures are found by name
    _debug_logs_and_state,
    connect,
    context,
    destination,
    hostile,
    network_guard,
    operator_download,
)
