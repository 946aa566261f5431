"""Where the rows live: one narrow interface (`SourceEngine`) over DuckDB, PostgreSQL and Spark.

Each engine runs the two aggregate queries of `storage.aggregate_sql` in its own dialect and
returns arrays only: the clipped base cuboids and measure histograms. Raw rows never leave the
engine that holds them; the service's memory is bounded by the cube, not by the row count.
"""

from storage.engines.interface import SourceEngine

__all__ = ["SourceEngine"]
