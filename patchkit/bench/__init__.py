"""``patchkit bench``: baseline vs DFLASH vs DDTREE in the real server, one server at a time on the same
build and arguments, at several concurrency levels; plus the T > 0 distribution check (``--sampling``)
and speed-ups projected from a published acceptance table (``--acceptance``).

Servers are launched, checked and torn down by :mod:`patchkit.smoke.launch`, the same code as
``patchkit smoke``. Entry point: :func:`patchkit.bench.run.run_bench`.
"""
