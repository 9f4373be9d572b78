"""Shared pieces of the Spark source and sink: options, offsets, the Arrow record path, broker access."""
