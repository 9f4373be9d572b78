"""Operator tools on top of the client: the web dashboard (``sparkmq dashboard``) and its pieces.

Depends on ``client/``, ``protocol/``, ``message/`` and ``errors`` only (plus starlette/uvicorn);
the command-line entry points live in ``sparkmq/cli/``.
"""
