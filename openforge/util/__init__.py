"""Helpers that know nothing of runs, harnesses or environments.

Holds: :mod:`~openforge.util.heap` (giving freed memory back), :mod:`~openforge.util.atomicdir` (folders
written all-or-nothing), :mod:`~openforge.util.console` (terminal output), :mod:`~openforge.util.extras`
(optional dependencies and their install hints), :mod:`~openforge.util.paths` (the cache root),
:mod:`~openforge.util.overrides` (``key=value`` overrides), :mod:`~openforge.util.modeldir` (model folders
and ``RUN@last`` names), :mod:`~openforge.util.serving` (uvicorn servers inside the driver's loop).

This ``__init__`` imports nothing.
"""
