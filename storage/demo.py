"""The demo table created on first start with an empty data dir: synthetic people, no real person.

Generated inside DuckDB from ``range(n)`` with a hash of the row number as the randomness, so it
is deterministic and needs no file. Columns: age (18–90), education (hs/bsc/msc/phd), hours
(10–80 per week), region (north/south/east/west), salary (correlated with education and age).
"""

from __future__ import annotations

from storage.database import Database
from storage.schema import TableSpec

DEMO_TABLE = "people"
DEMO_ROWS = 100_000

# u(k): a deterministic uniform in [0, 1) per row and stream k.
_U = "((hash(range * 7919 + {k}) % 1000003) / 1000003.0)"


def _u(k: int) -> str:
    return _U.format(k=k)


def create_demo_rows(db: Database, rows: int = DEMO_ROWS) -> None:
    edu = f"CASE WHEN {_u(1)} < 0.4 THEN 'hs' WHEN {_u(1)} < 0.75 THEN 'bsc' WHEN {_u(1)} < 0.95 THEN 'msc' ELSE 'phd' END"
    db.run(
        f"""
        CREATE TABLE IF NOT EXISTS main.{DEMO_TABLE} AS
        SELECT age, education, hours, region,
               round(greatest(0, (18000 + 900 * (age - 18) - 9 * (age - 18) * (age - 18))
                     * (CASE education WHEN 'hs' THEN 1.0 WHEN 'bsc' THEN 1.5 WHEN 'msc' THEN 1.8 ELSE 2.1 END)
                     * (hours / 40.0) * (0.5 + u5)), 2) AS salary
        FROM (
            SELECT CAST(18 + floor(({_u(0)} + {_u(2)}) / 2 * 73) AS INTEGER) AS age,
                   {edu} AS education,
                   CAST(10 + floor({_u(3)} * 71) AS INTEGER) AS hours,
                   ['north', 'south', 'east', 'west'][CAST(1 + floor({_u(4)} * 4) AS INTEGER)] AS region,
                   {_u(5)} AS u5
            FROM range(?)
        )
        """,
        [rows],
    )


def demo_spec() -> TableSpec:
    """Public metadata chosen from the domain (what anyone could declare), not from the rows."""
    return TableSpec.model_validate(
        {
            "name": DEMO_TABLE,
            "source": {"duckdb_table": DEMO_TABLE},
            "dimensions": [
                {"name": "age", "type": "int", "lo": 18, "hi": 90},
                {"name": "education", "type": "category", "values": ["hs", "bsc", "msc", "phd"]},
                {"name": "hours", "type": "int", "lo": 10, "hi": 80, "bin": 5},
                {"name": "region", "type": "category", "values": ["north", "south", "east", "west"]},
            ],
            "measures": [{"name": "salary", "lo": 0, "hi": 250000}],
            "epsilon": 1.0,
            "cube": {"build": "on_first_query"},  # the demo answers its first query by building
            "description": "Synthetic people (demo data, no real person).",
        }
    )
