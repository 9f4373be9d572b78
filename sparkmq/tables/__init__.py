"""Topics as Delta tables: committed messages materialized, exactly once, into ``<tableTopicRoot>/<topic>``."""
