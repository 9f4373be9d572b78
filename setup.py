"""Builds the optional C extensions; the metadata lives in pyproject.toml.

Each entry is ``optional``: without a compiler the package installs and runs on its pure-Python
reference paths (see docs/native.md).
"""

from setuptools import Extension, setup

EXTENSIONS = [
    Extension(
        "sparkmq.native._sendlane",
        sources=[
            "sparkmq/native/sendlane.c",
            "sparkmq/native/sendgroup.c",
            "sparkmq/native/sendlane_parse.c",
            "sparkmq/native/sendlane_fields.c",
            "sparkmq/native/pulllane.c",
        ],
        depends=["sparkmq/native/sendlane.h", "sparkmq/native/segment.h"],
        extra_compile_args=["-O2", "-std=c11"],
        optional=True,
    ),
    Extension(
        "sparkmq.native._queueread",
        sources=["sparkmq/native/queueread.c", "sparkmq/native/indexput.c", "sparkmq/native/segment.c"],
        depends=["sparkmq/native/segment.h"],
        extra_compile_args=["-O2", "-std=c11"],
        optional=True,
    ),
    # SEND_BATCH_MESSAGE bodies encoded and decoded in one call (reference: sparkmq/message/batch.py).
    Extension(
        "sparkmq.native._batchitems",
        sources=["sparkmq/native/batchitems.c"],
        extra_compile_args=["-O2", "-std=c11"],
        optional=True,
    ),
    # The producer's lean sends: frames from templates, SUCCESS answers delivered (reference: the Python they replace).
    Extension(
        "sparkmq.remoting._clientlane",
        sources=["sparkmq/remoting/client_lane.c"],
        extra_compile_args=["-O2", "-std=c11"],
        optional=True,
    ),
    # The Spark source's lean columns from a PULL body (reference: records_to_arrow's numpy path).
    Extension(
        "sparkmq.connector._leanrecords",
        sources=["sparkmq/connector/leanrecords.c"],
        extra_compile_args=["-O2", "-std=c11"],
        optional=True,
    ),
]

setup(ext_modules=EXTENSIONS)
