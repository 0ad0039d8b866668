"""Rewrite the docs' generated result blocks from the committed results files (the simulator's and the demo's).

    python -m verl_ebpo.tools.simulate.docs [--root .]

The same command as `python -m verl_ebpo.tools.results_docs`, kept under its first name.
"""

from __future__ import annotations

from verl_ebpo.tools.results_docs import main, update

__all__ = ["main", "update"]

if __name__ == "__main__":
    raise SystemExit(main())
