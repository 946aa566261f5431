"""Public table metadata as the admin declares it: dimension domains and measure bounds.

A dimension's domain is the single source of truth for how values map to cube cells: the
literal-to-cell mapping the query planner uses lives here, and `storage.aggregate_sql` bins source
rows by the same declaration.

Rows outside a domain are not lost: by default (``"outside": "keep"``) each dimension's
axis ends with cells for them after its declared cells — for numbers and dates one below ``lo``,
one above ``hi``, and one for NULL; for categories one for every value not declared ("other") and
one for NULL — so COUNT(*) and SUMs count every row, ranges reach past the bounds as SQL's do, and
``IS NULL`` works. ``"outside": "exclude"`` leaves such rows out of every aggregate (the contract's
original rule), and answers say so.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
MAX_DIMENSIONS = 32  # wide tables are measured as 1-/2-way cuboids (strategy `cuboids`), not a dense cube
MAX_CATEGORIES = 100_000
# Measure bounds live within ±1e15: float64 holds every integer up to 2^53 ≈ 9.0e15, so a
# clipped value, its ×1000 row-selection key (< 9.2e18, BIGINT) and every sensitivity derived from
# the bounds stay finite and exact in every engine; beyond it a bound is refused (422) up front.
MAX_MEASURE_BOUND = 1e15


def quote_ident(name: str) -> str:
    """A DuckDB/SQL-standard quoted identifier (embedded quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


OTHER_LABEL = "(other)"  # the group key of a category's undeclared values
Outside = Literal["keep", "exclude"]


class _Axis:
    """The cells a dimension's axis holds beyond its declared ones, after them: for a
    number or date [below lo, above hi, NULL], for a category [other, NULL]; none when excluded.
    (Mixed into the dimension models, which hold ``size`` and ``outside``.)"""

    @property
    def extra_names(self) -> tuple[str, ...]:
        if self.outside == "exclude":
            return ()
        return ("other", "null") if isinstance(self, CategoryDimension) else ("below", "above", "null")

    @property
    def cells(self) -> int:
        """The axis length in the cube: declared cells and the outside ones."""
        return self.size + len(self.extra_names)

    def extra_cell(self, name: str) -> int | None:
        """The cell of 'below' / 'above' / 'other' / 'null' on this axis (None: not kept)."""
        names = self.extra_names
        return self.size + names.index(name) if name in names else None

    def kept_cell(self, name: str) -> int:
        """`extra_cell` of an outside cell this axis keeps (ValueError when it keeps none)."""
        return self.size + self.extra_names.index(name)

    def outside_label(self, cell: int) -> Any:
        """The group key of an outside cell: NULL for the NULL cell, OTHER_LABEL for a category's."""
        name = self.extra_names[cell - self.size]
        return None if name == "null" else OTHER_LABEL if name == "other" else f"{name} the declared range"


class IntDimension(_Strict, _Axis):
    """Integers lo..hi (inclusive) in bins of width ``bin``; cell k holds lo+k·bin .. lo+(k+1)·bin−1."""

    name: str = Field(min_length=1, max_length=128)
    type: Literal["int"] = "int"
    lo: int
    hi: int
    bin: int = Field(default=1, ge=1)
    outside: Outside = "keep"

    @model_validator(mode="after")
    def _ordered(self) -> IntDimension:
        if self.hi < self.lo:
            raise ValueError(f"dimension {self.name!r}: hi must be >= lo")
        return self

    @property
    def size(self) -> int:
        return (self.hi - self.lo) // self.bin + 1

    def cell_of(self, value: Any) -> float:
        """Cell coordinate of a literal; may be fractional or outside [0, size) (callers clamp)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"dimension {self.name!r} takes numbers")
        return (math.floor(value) - self.lo) / self.bin

    def label(self, cell: int) -> Any:
        return self.lo + cell * self.bin if cell < self.size else self.outside_label(cell)


class CategoryDimension(_Strict, _Axis):
    """An ordered list of category strings; cell k holds ``values[k]`` (compared as text)."""

    name: str = Field(min_length=1, max_length=128)
    type: Literal["category"] = "category"
    values: list[str] = Field(min_length=1, max_length=MAX_CATEGORIES)
    outside: Outside = "keep"

    @field_validator("values")
    @classmethod
    def _unique(cls, values: list[str]) -> list[str]:
        if len(set(values)) != len(values):
            raise ValueError("category values must be unique")
        return values

    @property
    def size(self) -> int:
        return len(self.values)

    def index(self, value: Any) -> int | None:
        if isinstance(value, bool):
            return None
        text = value if isinstance(value, str) else _number_text(value)
        try:
            return self.values.index(text)
        except ValueError:
            return None

    def label(self, cell: int) -> Any:
        return self.values[cell] if cell < self.size else self.outside_label(cell)


Granularity = Literal["day", "month", "year"]


class DateDimension(_Strict, _Axis):
    """Dates lo..hi at a granularity; cell k is the k-th day/month/year from lo's."""

    name: str = Field(min_length=1, max_length=128)
    type: Literal["date"] = "date"
    lo: dt.date
    hi: dt.date
    granularity: Granularity = "day"
    outside: Outside = "keep"

    @model_validator(mode="after")
    def _ordered(self) -> DateDimension:
        if self.hi < self.lo:
            raise ValueError(f"dimension {self.name!r}: hi must be >= lo")
        return self

    def _ordinal(self, d: dt.date) -> int:
        if self.granularity == "day":
            return d.toordinal()
        if self.granularity == "month":
            return d.year * 12 + d.month - 1
        return d.year

    @property
    def size(self) -> int:
        return self._ordinal(self.hi) - self._ordinal(self.lo) + 1

    def cell_of(self, value: dt.date) -> int:
        return self._ordinal(value) - self._ordinal(self.lo)

    def date_of(self, cell: int) -> dt.date:
        """The first day a cell stands for."""
        if self.granularity == "day":
            return dt.date.fromordinal(self.lo.toordinal() + cell)
        if self.granularity == "month":
            k = self._ordinal(self.lo) + cell
            return dt.date(k // 12, k % 12 + 1, 1)
        return dt.date(self.lo.year + cell, 1, 1)

    def truncated_label(self, cell: int, unit: str) -> Any:
        """`DATE_TRUNC(unit, d)` of the cell's date, written at this dimension's grain (a year of a
        month dimension is '2020-01'; of a day dimension '2020-01-01')."""
        if cell >= self.size:
            return self.outside_label(cell)
        d = self.date_of(cell)
        if unit == "week":  # a day dimension's ISO week: its Monday, as PostgreSQL's date_trunc('week')
            return (d - dt.timedelta(days=d.weekday())).isoformat()
        d = dt.date(d.year, 1 if unit == "year" else (d.month - 1) // 3 * 3 + 1 if unit == "quarter" else d.month, 1)
        return {"day": d.isoformat(), "month": d.strftime("%Y-%m"), "year": f"{d.year:04d}"}[self.granularity]

    def label(self, cell: int) -> Any:
        if cell >= self.size:
            return self.outside_label(cell)
        if self.granularity == "day":
            return dt.date.fromordinal(self.lo.toordinal() + cell).isoformat()
        if self.granularity == "month":
            k = self._ordinal(self.lo) + cell
            return f"{k // 12:04d}-{k % 12 + 1:02d}"
        return f"{self.lo.year + cell:04d}"


Dimension = Annotated[IntDimension | CategoryDimension | DateDimension, Field(discriminator="type")]


class MeasureAxis(_Strict):
    """Magnitude classes of a measure (`privacy.clipping.measure_axis`): its SUM is released per
    class, normalised by the class bound, so a query's noise follows the classes it touches, and
    conditions on the measure (``WHERE salary < 50000``) select classes."""

    kind: Literal["log2", "linear", "edges"] = "log2"
    classes: int | None = Field(
        default=None, ge=1, le=64, description="log2: doubling classes per side; linear: classes"
    )
    edges: list[float] | None = Field(default=None, max_length=65, description='"edges": class edges inside [lo, hi]')
    count: bool = False  # also release COUNT per class (its own ε share): COUNT(*)/AVG with a condition on the measure
    per_octave: int = Field(default=1, ge=1, le=8, description="log2: sub-classes per octave (finer quantiles)")
    # linear: a class holding 0 alone, so `WHERE m = 0` / `m > 0` select whole classes (hours worked
    # = 0 is half of a census's rows). Registration settles it: true where lo ≤ 0 ≤ hi. A spec stored
    # before it existed reads None, i.e. no zero class — the classes its cubes were built with.
    zero: bool | None = Field(default=None, description="linear: a class holding only 0 (default: when lo ≤ 0 ≤ hi)")

    @model_validator(mode="after")
    def _consistent(self) -> MeasureAxis:
        if (self.kind == "edges") != (self.edges is not None):
            raise ValueError('axis "edges" goes with kind "edges" (and kind "edges" needs it)')
        if self.kind != "log2" and self.per_octave != 1:
            raise ValueError('"per_octave" goes with axis kind "log2"')
        if self.zero and self.kind != "linear":
            raise ValueError('"zero" goes with axis kind "linear" (log2 axes have a zero class already)')
        if self.kind == "edges" and self.classes is not None:
            raise ValueError('axis kind "edges" takes "edges", not "classes"')
        if self.edges is not None and not all(math.isfinite(e) for e in self.edges):
            raise ValueError("axis edges must be finite numbers")
        return self


class Measure(_Strict):
    """A numeric column with public bounds [lo, hi]; values are clipped into them."""

    name: str = Field(min_length=1, max_length=128)
    lo: float
    hi: float
    # fixed: clip to [lo, hi]; sbs / clasp: PRIMA's double-sided clipping chosen from a DP histogram;
    # support: the data's noisy support from the same kind of histogram (privacy/clipping/data_driven.py).
    # Default "fixed", except under cube strategy "prima", where it is "clasp" (TableSpec below).
    clipping: Literal["fixed", "sbs", "clasp", "support"] = "fixed"
    axis: MeasureAxis | None = None
    # SQL's AVG(m) divides by COUNT(m), the rows where m is present. nullable: the build
    # also releases COUNT(m) per cell (its own ε share, `privacy.accounting.split`), so AVG and COUNT(m) mean
    # what SQL means when some values are NULL or not numbers. false: the admin vouches the column
    # is never NULL; COUNT(*) stands in (ε saved), and AVG/COUNT(m) answers say so in a note.
    nullable: bool = True
    # A public order of magnitude of one row's |value| (e.g. from published statistics), stated by the
    # admin. Read only by the registration preview, which warns when the SUM's total stddev exceeds
    # 10 % of expected_rows × typical; never used by a build.
    typical: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> Measure:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)):
            raise ValueError(f"measure {self.name!r}: bounds must be finite")
        if max(abs(self.lo), abs(self.hi)) > MAX_MEASURE_BOUND:
            raise ValueError(
                f"measure {self.name!r}: bounds must lie within ±{MAX_MEASURE_BOUND:g} (float64 sums and "
                "sensitivities stay exact there); declare the column in larger units (thousands, "
                "millions) to fit"
            )
        if self.hi <= self.lo:
            raise ValueError(f"measure {self.name!r}: hi must be > lo")
        if self.axis is not None and self.clipping != "fixed":
            raise ValueError(
                f"measure {self.name!r}: an axis needs fixed clipping — its classes come from the "
                f"declared bounds, and {self.clipping!r} would move the bounds after the classes are set"
            )
        if (
            self.axis is not None
            and self.axis.edges is not None
            and any(not self.lo <= e <= self.hi for e in self.axis.edges)
        ):
            raise ValueError(f"measure {self.name!r}: axis edges must lie within [{self.lo:g}, {self.hi:g}]")
        return self


class PostgresSource(_Strict):
    """A PostgreSQL table, aggregated inside PostgreSQL. The DSN is a reference, never the text."""

    dsn: str = Field(
        pattern=r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:/.+)$",
        max_length=4096,
        description='"env:VARIABLE" or "file:/absolute/path/to/secret" holding the DSN',
    )
    table: str = Field(min_length=1, max_length=300, description='"schema.table" or "table" (exact, case-sensitive)')


class SparkSource(_Strict):
    """A Spark catalog table or a Parquet path, aggregated by Spark (``pip install .[spark]``)."""

    table: str | None = Field(default=None, min_length=1, max_length=300)
    parquet: str | None = Field(default=None, min_length=1, max_length=4096)
    master: str = Field(default="local[*]", min_length=1, max_length=300)

    @model_validator(mode="after")
    def _one_of(self) -> SparkSource:
        if bool(self.table) == bool(self.parquet):
            raise ValueError("spark source needs exactly one of 'table', 'parquet'")
        return self


SOURCE_KINDS = ("csv", "parquet", "duckdb_table", "postgres", "spark")


class Source(_Strict):
    """Where the rows come from: exactly one of csv / parquet / duckdb_table / postgres / spark."""

    csv: str | None = None
    parquet: str | None = None
    duckdb_table: str | None = None
    postgres: PostgresSource | None = None
    spark: SparkSource | None = None
    delimiter: str | None = Field(default=None, max_length=4)
    header: bool | None = None
    columns: list[str] | None = None  # names for a header-less CSV
    # a CSV's text encoding (DuckDB reads these three natively); default UTF-8
    encoding: Literal["utf-8", "utf-16", "latin-1"] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        given = [k for k in SOURCE_KINDS if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("source needs exactly one of " + ", ".join(repr(k) for k in SOURCE_KINDS))
        return self

    @property
    def remote(self) -> bool:
        """Rows stay in another engine (nothing is loaded into Prima's DuckDB file)."""
        return self.postgres is not None or self.spark is not None


class PrivacyUnit(_Strict):
    """Who is protected: the rows sharing one value of ``column`` are one person (or
    customer, device…). A build keeps at most ``max_rows`` in-domain rows per unit — chosen by a
    salted hash, inside the source's own aggregate — and every sensitivity grows k-fold."""

    column: str = Field(min_length=1, max_length=128)
    max_rows: Annotated[int, Field(ge=1, le=10_000)] | Literal["auto"] = Field(
        description='rows kept per unit (k; sensitivities are k× a row\'s), or "auto": k from a DP histogram of rows per unit'
    )
    auto_quantile: float = Field(default=0.9, ge=0.5, le=0.99, description='"auto": k covers this share of units fully')
    auto_share: float = Field(
        default=0.05, gt=0, lt=0.5, description='"auto": the share of a build\'s ε for its histogram'
    )
    id_space: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,62}$",
        description="tables naming the same id space share one budget",
    )
    # The secret that orders each unit's rows before truncation: made at registration, kept in the
    # catalog beside (never inside) the public spec, so no one can predict which rows are kept.
    salt: str | None = Field(default=None, exclude=True, repr=False)


class Growth(_Strict):
    """A table that grows one period at a time (docs/privacy-model.md "Tables that grow").

    ``period`` names a date dimension: one period is one of its cells (a day, month or year at its
    granularity), its ``lo``..``hi`` the horizon of periods the table may ever hold (public). Each
    closed period is measured once, from its own rows only (``prima append``), into releases with the
    period axis summed away; answers combine the releases that tile a query's periods.

    ``model`` says who is protected and how the spend adds up:
    * ``"period"`` — one row-period (or, with ``privacy_unit``, one unit's rows in one period): the
      periods' rows are disjoint, so their releases compose in parallel; the table's ``epsilon``
      (``rho``) is what every period gets, and no period is ever charged twice.
    * ``"lifetime"`` — one row (or unit) across all periods: releases compose sequentially against the
      id space's total (the table's ``epsilon``/``rho``, a lifetime cap); each append charges
      ``per_period``, and the runway is the periods the remaining budget still pays for.

    ``releases``: ``"flat"`` measures every period alone (a range of r periods sums r releases);
    ``"dyadic"`` also releases every closed block of 2, 4, 8… periods (the tree mechanism: Dwork,
    Naor, Pitassi & Rothblum 2010; Chan, Shi & Song 2011), each at 1/L of the period's amount over
    L levels, so a range is answered from O(log r) releases; ``"auto"`` picks the one with the lower
    expected variance for ranges of ``typical_range`` periods (public; default: a quarter of the
    horizon), `privacy.accounting.periods.choose_releases`."""

    period: str = Field(min_length=1, max_length=128)
    model: Literal["period", "lifetime"] = "period"
    per_period: float | None = Field(default=None, gt=0, le=100)
    releases: Literal["auto", "flat", "dyadic"] = "auto"
    typical_range: int | None = Field(default=None, ge=1)
    # true: the server appends every closed period itself (checked every PRIMA_APPEND_EVERY seconds)
    schedule: bool = False


class AnswerDefaults(_Strict):
    """How this table's answers show what the data may not hold (each overridable per query:
    REST ``"outside_groups"`` / ``"noisy"``, wire ``SET prima.outside_groups`` / ``SET prima.noisy``)."""

    outside_groups: Literal["measured", "all"] = Field(
        default="measured",
        description="GROUP BY shows a (other) or NULL group only when its noisy count clears the level an "
        'empty group\'s noise passes in 0.1 % of builds ("measured"), or always ("all"); totals count '
        "them either way",
    )
    noisy: Literal["flag", "null"] = Field(
        default="flag",
        description="a value whose 95 % interval is wider than ±50 % of it is flagged (noisy: true), "
        'or shown as NULL ("null")',
    )
    truncate: bool = Field(
        default=False,
        description="SUMs of a measure with an axis truncated to the classes holding significant mass in "
        "the query's region (Qiu et al.: less noise, biased low where upper classes hold real mass the "
        "noise hides); false: unbiased and additive",
    )


class WorkloadEntry(_Strict):
    """A query the table's dashboards ask: a GROUP BY set (``[]``: the total) or a SQL statement on
    this table, with a relative weight. The build's ε shares favour what is declared
    (privacy/strategies/workload.py); other queries are still answered, with honest bars."""

    group_by: list[str] = Field(default_factory=list, max_length=2)
    sql: str | None = Field(default=None, max_length=20_000)
    weight: float = Field(default=1.0, gt=0, le=1000)

    @model_validator(mode="after")
    def _one_form(self) -> WorkloadEntry:
        if self.sql is not None and self.group_by:
            raise ValueError("a workload entry is a group_by list or a sql statement, not both")
        return self


class CubeConfig(_Strict):
    """How the cube is measured: strategy name, optional ε-weights per aggregate, optional ε."""

    # "auto": the dense `pairwise` cube while it is small, else `cuboids` (privacy.strategies.resolve)
    strategy: str = "auto"
    # extra cuboids to measure (lists of dimension names, e.g. [["age", "sex", "race"]]): `cuboids` only
    cuboids: list[list[str]] | None = Field(default=None, max_length=64)
    # `cuboids` only: "shrunk" — each pair's interaction shrunk toward independence (privacy/estimation/shrinkage.py;
    # more accurate, 2-column bars estimated) — or "least_squares" (exact 2-column bars)
    estimator: Literal["shrunk", "least_squares"] = "shrunk"
    # `cuboids` with shrunk pairs: the 1-way cuboids' fraction of the budget (default 0.55, privacy/estimation/cuboid_fit.py);
    # higher favours 1-column queries and GROUP BYs, lower 2–4-column ones
    one_way_share: float | None = Field(default=None, gt=0, lt=1)
    # `cuboids` and `pairwise` (a dense cube of ≥ 4 dimensions): rounds of private selection of 3-way cuboids
    # the pair model gets worst (AIM's rule, privacy/strategies/cuboid_selection.py), each pick measured.
    # None: one round per dimension (none where a declared workload has no statement over 3+ columns:
    # engine/builds/workload.py selection_rounds); 0: none
    select_rounds: int | None = Field(default=None, ge=0, le=64)
    # with select_rounds: the fraction of each COUNT's budget the selection and the picks'
    # measurements get (10 % of it selects, 90 % measures)
    select_share: float = Field(default=0.1, gt=0, lt=1)
    # keys: "count" and measure names, relative (a missing key weighs 1); default: COUNT 20 %, SUMs the rest
    weights: dict[str, float] | None = None
    # the queries dashboards ask (a dense cube: `auto`, `pairwise`, `marginals`): the 0- and 1-D marginals
    # are measured too, the shares and the COUNT/SUM split minimise these queries' variance relative to a
    # per-query engine's (HDMM's OPT_M objective); on a wide table (`cuboids`) the split, the 1-/2-way
    # cuboids' shares and a class-axis SUM's (unless one_way_share is set: privacy/strategies/cuboids.py),
    # and a statement's 3 or 4 columns measured as a cuboid (engine/builds/workload.py declared_cuboids). None: the
    # default workload (engine/builds/workload.py); []: none (every pair alike, COUNT 20 %)
    workload: list[WorkloadEntry] | None = Field(default=None, max_length=200)
    # with a workload: the weight of the queries it does not name (every 1- and 2-column GROUP BY,
    # spread evenly) relative to the declared ones'. 0: only the declared queries count (their errors
    # within ~3 % of the optimum; an undeclared pair's stddev 7–300× larger, bench/workloads.py)
    ad_hoc_weight: float = Field(default=0.05, ge=0, le=1)
    # month and year totals of each date dimension declared by day (years of one by month), released
    # beside the cube and combined with its answers (privacy/strategies/time_rollups.py). None: on for
    # dimensions declared by day; true: by month too; false: none. Never on a growing table.
    time_rollups: bool | None = None
    epsilon: float | None = Field(default=None, gt=0)  # default: the table's whole budget (a pure-ε table)
    rho: float | None = Field(default=None, gt=0)  # the same for a table budgeted in ρ
    clipping_share: float = Field(default=0.1, gt=0, lt=1)  # of ε, for sbs/clasp/support histograms
    # Who may start the (charged) build: "admin" — only the admin build endpoint or
    # `prima build`, so no analyst query spends the budget unseen; "on_first_query" — the first query
    # builds (the demo table's mode, and a table whose admin wants it).
    build: Literal["admin", "on_first_query"] = "admin"


class TableSpec(_Strict):
    """The registration body of ``POST /v1/admin/tables``."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={
            "examples": [
                {
                    "name": "staff",
                    "source": {"csv": "/data/import/staff.csv"},
                    "dimensions": [
                        {"name": "age", "type": "int", "lo": 18, "hi": 70},
                        {"name": "dept", "type": "category", "values": ["ops", "eng", "sales", "support"]},
                        {
                            "name": "hired",
                            "type": "date",
                            "lo": "2012-01-01",
                            "hi": "2025-12-31",
                            "granularity": "month",
                        },
                    ],
                    "measures": [{"name": "salary", "lo": 0, "hi": 250000}],
                    "epsilon": 1.0,
                    "cube": {"strategy": "pairwise"},
                }
            ]
        },
    )

    name: str
    source: Source
    dimensions: list[Dimension] = Field(min_length=1, max_length=MAX_DIMENSIONS)
    measures: list[Measure] = Field(default_factory=list, max_length=16)
    # The budget, in one currency (docs/privacy-model.md "Two currencies"): "epsilon" alone is
    # pure ε-DP with Laplace noise (the default); "rho" is ρ-zCDP with discrete Gaussian noise; "epsilon"
    # with "delta" is (ε, δ)-DP, kept as the largest ρ that implies it (privacy.accounting.currencies.declared_total).
    epsilon: float | None = Field(default=None, gt=0, le=100)
    rho: float | None = Field(default=None, gt=0, le=100)
    delta: float | None = Field(default=None, gt=0, le=1e-3)
    cube: CubeConfig = Field(default_factory=CubeConfig)
    answers: AnswerDefaults = Field(default_factory=AnswerDefaults)
    description: str | None = Field(default=None, max_length=2000)
    privacy_unit: PrivacyUnit | None = None  # without it, one row is the unit of privacy
    # A public row count stated by the admin (a published dataset's size, last year's volume): the
    # registration preview compares SUM stddevs with the totals it makes plausible. Never used by a build.
    expected_rows: int | None = Field(default=None, ge=1)
    growth: Growth | None = None  # a table appended one period at a time; None: measured once

    @model_validator(mode="before")
    @classmethod
    def _prima_clips_with_clasp(cls, data: Any) -> Any:
        """``strategy: prima`` means CLASP clipping for every measure that does not say otherwise."""
        if not isinstance(data, dict) or not isinstance(data.get("cube"), dict):
            return data
        if data["cube"].get("strategy") != "prima" or not isinstance(data.get("measures"), list):
            return data
        measures = [{"clipping": "clasp", **m} if isinstance(m, dict) else m for m in data["measures"]]
        return {**data, "measures": measures}

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not NAME_RE.match(name):
            raise ValueError("table name must match [A-Za-z_][A-Za-z0-9_]{0,62}")
        return name

    @model_validator(mode="after")
    def _distinct_columns(self) -> TableSpec:
        names = [d.name.lower() for d in self.dimensions] + [m.name.lower() for m in self.measures]
        if len(set(names)) != len(names):
            raise ValueError("dimension and measure names must be distinct (case-insensitive)")
        return self

    @model_validator(mode="after")
    def _unit_column(self) -> TableSpec:
        unit = self.privacy_unit
        if unit is not None and (self.dimension(unit.column) is not None or self.measure(unit.column) is not None):
            raise ValueError(
                f"privacy_unit.column {unit.column!r} is a dimension or measure; name the id column "
                "(it is never released, only used to bound each unit's rows)"
            )
        if unit is not None and unit.max_rows == "auto" and any(m.clipping != "fixed" for m in self.measures):
            raise ValueError(
                '"max_rows": "auto" works with fixed clipping only: data-driven clipping reads its own '
                "histogram at the chosen k; declare k, or fixed clipping"
            )
        if unit is not None and self.cube.strategy == "hdpview":
            raise ValueError(
                "hdpview's partition is calibrated to one row per unit; use another strategy with a privacy_unit"
            )
        return self

    @model_validator(mode="after")
    def _one_budget(self) -> TableSpec:
        if (self.epsilon is None) == (self.rho is None):
            raise ValueError(
                'declare the budget once: "epsilon" (pure ε-DP), "rho" (ρ-zCDP), or "epsilon" with '
                '"delta" ((ε, δ)-DP, kept as ρ)'
            )
        if self.delta is not None and self.epsilon is None:
            raise ValueError('"delta" goes with "epsilon": an (ε, δ) budget; a "rho" budget needs no δ')
        if self.currency == "rho" and self.cube.epsilon is not None:
            raise ValueError("this table is budgeted in ρ: give the build's share as cube.rho, not cube.epsilon")
        if self.currency == "epsilon" and self.cube.rho is not None:
            raise ValueError("this table is budgeted in pure ε: give the build's share as cube.epsilon, not cube.rho")
        return self

    @property
    def currency(self) -> str:
        """ "epsilon" (pure ε, Laplace) or "rho" (ρ-zCDP, discrete Gaussian; (ε, δ) budgets too)."""
        return "epsilon" if self.rho is None and self.delta is None else "rho"

    @property
    def cube_amount(self) -> float | None:
        """One build's share of the budget (cube.epsilon or cube.rho), None: all that remains."""
        return self.cube.rho if self.currency == "rho" else self.cube.epsilon

    @property
    def rows_per_unit(self) -> int:
        """k: the rows one unit of privacy may contribute (1 without a privacy unit; for "auto", 1
        until a build has chosen k and put it in the spec it aggregates with)."""
        if self.privacy_unit is None or self.privacy_unit.max_rows == "auto":
            return 1
        return self.privacy_unit.max_rows

    @property
    def auto_rows_per_unit(self) -> bool:
        return self.privacy_unit is not None and self.privacy_unit.max_rows == "auto"

    def with_rows_per_unit(self, k: int) -> TableSpec:
        """This spec with its privacy unit's k fixed (a build's choice for "auto")."""
        assert self.privacy_unit is not None
        return self.model_copy(update={"privacy_unit": self.privacy_unit.model_copy(update={"max_rows": k})})

    @model_validator(mode="after")
    def _growth(self) -> TableSpec:
        """What a growing table needs: a date period dimension whose outside rows are excluded (a row
        with no period is in no period's release), another dimension to release per period, a
        per-period amount under the lifetime model, and synopses that mean the same in every period
        (declared clipping bounds and k: data-chosen ones could differ from period to period)."""
        g = self.growth
        if g is None:
            return self
        dim = self.dimension(g.period)
        if not isinstance(dim, DateDimension):
            raise ValueError(f"growth.period {g.period!r} must name a date dimension (its cells are the periods)")
        if dim.outside != "exclude":
            raise ValueError(
                f'growth.period {g.period!r}: declare "outside": "exclude" — a row dated outside '
                "the horizon (or with no date) belongs to no period and is in no release"
            )
        if len(self.dimensions) < 2:
            raise ValueError(
                "a growing table needs a dimension besides its period: each period's release is a "
                "synopsis over the other dimensions"
            )
        if (g.model == "lifetime") != (g.per_period is not None):
            raise ValueError(
                'growth.per_period (what each append charges) goes with "model": "lifetime", where the '
                'table\'s budget is the lifetime cap; under "model": "period" the table\'s budget is '
                "what every period gets"
            )
        cap = self.epsilon if self.currency == "epsilon" else self.rho  # an (ε, δ) cap is checked as ρ later
        if g.model == "lifetime" and cap is not None and g.per_period > cap:
            raise ValueError("growth.per_period exceeds the lifetime budget: not even one period could be appended")
        if self.cube_amount is not None:
            raise ValueError("a growing table spends per period (growth), not per build: leave out cube.epsilon/rho")
        if any(m.clipping != "fixed" or m.axis is not None for m in self.measures):
            raise ValueError(
                "a growing table's measures need fixed clipping and no axis: each period's release must "
                "clip the same way for their sums to add up"
            )
        if self.auto_rows_per_unit:
            raise ValueError(
                'a growing table needs a declared privacy_unit.max_rows (not "auto"): every period '
                "must bound its units the same way"
            )
        if g.model == "lifetime" and self.privacy_unit is not None and g.releases == "dyadic":
            raise ValueError(
                'a lifetime table with a privacy_unit releases each period alone ("releases": "flat"): a '
                "block's release would bound each unit over the whole block, unlike its periods' own"
            )
        return self

    @model_validator(mode="after")
    def _named_cuboids(self) -> TableSpec:
        for columns in self.cube.cuboids or []:
            if not 1 <= len(columns) <= 4:
                raise ValueError("each cube.cuboids entry names 1 to 4 dimensions")
            unknown = [c for c in columns if self.dimension(c) is None]
            if unknown:
                raise ValueError(f"cube.cuboids names {unknown}, which are not dimensions of this table")
        for entry in self.cube.workload or []:
            unknown = [c for c in entry.group_by if self.dimension(c) is None]
            if unknown:
                raise ValueError(f"cube.workload names {unknown}, which are not dimensions of this table")
        if self.cube.workload and self.cube.strategy not in ("auto", "pairwise", "marginals", "cuboids"):
            raise ValueError(
                f"cube.workload applies to the pairwise, marginals and cuboids strategies (and auto); "
                f"{self.cube.strategy!r} chooses its own shares"
            )
        if self.cube.cuboids and self.cube.strategy not in ("auto", "cuboids"):
            raise ValueError(
                f"cube.cuboids applies to the cuboids strategy; {self.cube.strategy!r} measures a dense cube"
            )
        if self.cube.estimator != "shrunk" and self.cube.strategy not in ("auto", "cuboids"):
            raise ValueError(
                f"cube.estimator applies to the cuboids strategy; {self.cube.strategy!r} measures a dense cube"
            )
        if self.cube.one_way_share is not None and (
            self.cube.strategy not in ("auto", "cuboids") or self.cube.estimator != "shrunk"
        ):
            raise ValueError(
                "cube.one_way_share applies to the cuboids strategy with shrunk pairs (least squares "
                "weighs the 1-way cuboids by their size)"
            )
        asked = self.cube.select_rounds not in (None, 0) or self.cube.select_share != CubeConfig().select_share
        if asked and self.cube.strategy not in ("auto", "cuboids", "pairwise"):
            raise ValueError(
                f"cube.select_rounds and cube.select_share apply to the strategies that fill 3-column answers "
                f"from a model of the pairs (cuboids, pairwise, and auto, which takes one of them), which pick "
                f"the 3-way cuboids to measure; {self.cube.strategy!r} measures what it answers"
            )
        return self

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.cells for d in self.dimensions)

    def named_cuboids(self) -> list[tuple[int, ...]]:
        """``cube.cuboids`` as sorted axis positions."""
        names = [d.name.lower() for d in self.dimensions]
        return [tuple(sorted({names.index(c.lower()) for c in cols})) for cols in self.cube.cuboids or []]

    def dimension(self, name: str) -> Any | None:
        return self._by_name()[0].get(name.lower())

    def measure(self, name: str) -> Measure | None:
        return self._by_name()[1].get(name.lower())

    def declared_measure(self, name: str) -> Measure:
        """The measure ``name`` where the caller has already resolved it (KeyError otherwise)."""
        return self._by_name()[1][name.lower()]

    def declared_dimension(self, name: str) -> Any:
        """The dimension ``name`` where the caller has already resolved it (KeyError otherwise)."""
        return self._by_name()[0][name.lower()]

    def _by_name(self) -> tuple[dict[str, Any], dict[str, Measure]]:
        """Dimensions and measures by lower-case name (the first of a name wins): the binder looks
        names up several times per query. Kept with the very lists it indexes, so a `model_copy`
        that replaces them (which copies this entry too) is indexed afresh."""
        kept = self.__dict__.get("_names")
        if kept is None or kept[0] is not self.dimensions or kept[1] is not self.measures:
            dims: dict[str, Any] = {}
            measures: dict[str, Measure] = {}
            for d in self.dimensions:
                dims.setdefault(d.name.lower(), d)
            for m in self.measures:
                measures.setdefault(m.name.lower(), m)
            kept = self.__dict__["_names"] = (self.dimensions, self.measures, dims, measures)
        return kept[2], kept[3]


def _number_text(value: int | float) -> str:
    """How a numeric literal compares against text categories: 3 and 3.0 both read as '3'."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)
