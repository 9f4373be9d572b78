"""Builds the optional C extensions; the metadata lives in pyproject.toml.

Each entry is ``optional``: without a compiler the package installs and runs on its pure-Python
reference paths (see docs/native.md).
"""

from setuptools import Extension, setup


def optional_c(name: str, *sources: str, depends: tuple[str, ...] = ()) -> Extension:
    """An extension built with C11 at -O2 when a compiler is there, skipped (not failed) when not."""
    return Extension(
        name, sources=list(sources), depends=list(depends), extra_compile_args=["-O2", "-std=c11"], optional=True
    )


EXTENSIONS = [
    optional_c(
        "sparkmq.native._sendlane",
        "sparkmq/native/sendlane.c",
        "sparkmq/native/sendgroup.c",
        "sparkmq/native/sendlane_parse.c",
        "sparkmq/native/sendlane_fields.c",
        "sparkmq/native/pulllane.c",
        depends=("sparkmq/native/sendlane.h", "sparkmq/native/indexput.h"),
    ),
    optional_c(
        "sparkmq.native._queueread",
        "sparkmq/native/queueread.c",
        "sparkmq/native/indexput.c",
        depends=("sparkmq/native/indexput.h",),
    ),
    # SEND_BATCH_MESSAGE bodies encoded and decoded in one call (reference: sparkmq/message/batch.py).
    optional_c("sparkmq.native._batchitems", "sparkmq/native/batchitems.c"),
    # A producer's send frame rendered and a read's plain answers split (references: client/send_frames.py,
    # remoting/client_connection.py).
    optional_c("sparkmq.native._clientframes", "sparkmq/native/clientframes.c"),
    # The Spark source's lean columns from a PULL body (reference: records_to_arrow's numpy path).
    optional_c("sparkmq.connector._leanrecords", "sparkmq/connector/leanrecords.c"),
]

setup(ext_modules=EXTENSIONS)
