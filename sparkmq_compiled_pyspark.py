"""Spark's Python processes import the installed pyspark's compiled modules, not its ``pyspark.zip``.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's ``PYTHONPATH``
(the streaming-source runner, the data source planners, the worker daemon). A zip holds no
bytecode, so each of those fresh processes compiles every pyspark module it imports: 0.8–1.3 s
of CPU per process here, against 0.25 s from the installed package's ``__pycache__``. Spark
starts one such runner per streaming query of a Python data source, so the zip was most of the
query's fixed start-up cost (bench/spark_source_bench.py; docs/benchmarks.md).

When the zip is the one inside an installed ``pyspark`` package that is itself on ``sys.path``
(a pip-installed pyspark: ``SPARK_HOME`` is that package), the zip and the package hold the
same modules, so dropping the zip from ``sys.path`` changes nothing but the import's cost. A zip
from any other Spark distribution is left where Spark put it.

A ``.pth`` file in site-packages (:data:`PTH_NAME`, :data:`PTH_TEXT`) calls
:func:`prefer_compiled_pyspark` at interpreter start, only when a ``pyspark.zip`` is on ``sys.path``.
Installing sparkmq never writes it: a ``.pth`` runs in every interpreter of the environment, so it
is opt-in, with ``sparkmq pyspark-bytecode enable`` (``disable`` removes it, ``status`` tells). The
project's own virtualenv (``make venv``) enables it. This module stays outside the ``sparkmq``
package so that the call does not import the package.
"""

from __future__ import annotations

import os

ZIP_NAME = "pyspark.zip"
PTH_NAME = "sparkmq-compiled-pyspark.pth"
PTH_TEXT = (
    "# sparkmq: Spark's Python workers import the installed pyspark's bytecode, not pyspark.zip"
    " (sparkmq_compiled_pyspark.py; `sparkmq pyspark-bytecode disable` removes this file)\n"
    'import sys; any(p.endswith("pyspark.zip") for p in sys.path) and exec("try:\\n from sparkmq_compiled_pyspark'
    ' import prefer_compiled_pyspark\\nexcept ImportError:\\n pass\\nelse:\\n prefer_compiled_pyspark(sys.path)")\n'
)


def installed_zip_site(entry: str, path: list[str]) -> str | None:
    """The site directory whose installed ``pyspark`` package holds ``entry`` (a pyspark.zip), else None."""
    if os.path.basename(entry) != ZIP_NAME:
        return None
    package = os.path.dirname(os.path.dirname(os.path.dirname(entry)))  # <site>/pyspark/python/lib/pyspark.zip
    site = os.path.dirname(package)
    if os.path.basename(package) != "pyspark" or not on_path(site, path):
        return None
    if not os.path.isfile(os.path.join(package, "__init__.py")):
        return None
    return site


def on_path(directory: str, path: list[str]) -> bool:
    """Whether ``path`` holds ``directory`` under any name: Spark names its zip by the real path, while an
    interpreter run through a symlinked virtualenv puts its site directory on ``sys.path`` by the link's."""
    if directory in path:
        return True
    real = os.path.realpath(directory)
    return any(os.path.realpath(entry) == real for entry in path)


def prefer_compiled_pyspark(path: list[str]) -> list[str]:
    """Remove from ``path`` (in place) the zips that shadow an installed pyspark and py4j; return them.

    The py4j source zip beside the pyspark zip goes too when the same site directory has ``py4j``
    installed. Every other entry keeps its place.
    """
    removed: list[str] = []
    for entry in list(path):
        site = installed_zip_site(entry, path)
        if site is None:
            continue
        path.remove(entry)
        removed.append(entry)
        lib = os.path.dirname(entry)
        if os.path.isdir(os.path.join(site, "py4j")):
            for other in list(path):
                if os.path.dirname(other) == lib and os.path.basename(other).startswith("py4j-"):
                    path.remove(other)
                    removed.append(other)
    return removed


def enable(site: str) -> str:
    """Write the ``.pth`` into the site directory ``site``; return its path."""
    path = os.path.join(site, PTH_NAME)
    with open(path, "w", encoding="utf-8") as pth:
        pth.write(PTH_TEXT)
    return path


def disable(site: str) -> bool:
    """Remove the ``.pth`` from ``site``; whether there was one."""
    try:
        os.remove(os.path.join(site, PTH_NAME))
    except FileNotFoundError:
        return False
    return True


def enabled(site: str) -> bool:
    """Whether ``site`` holds this module's ``.pth``, as this module writes it."""
    try:
        with open(os.path.join(site, PTH_NAME), encoding="utf-8") as pth:
            return pth.read() == PTH_TEXT
    except FileNotFoundError:
        return False
