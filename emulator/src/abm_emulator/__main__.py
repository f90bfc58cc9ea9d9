"""``python -m abm_emulator``: the same as the ``abm-emulator`` console script."""

from abm_emulator.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
