"""The learning benchmark's second design (``benchmarks/learning.py`` is its command line).

Modules: ``design`` (the scale, the arms, the run directories and each run's configuration),
``calibrate`` (the SFT checkpoint along its curve and the family mix, saved), ``arms`` (the resumable
training runs and held-out points of every arm and seed), ``report`` (the clustered intervals, the
per-family table, the JSON summary and the PNG curve).
"""
