"""The PostgreSQL wire face: BI tools and drivers connect as to a PostgreSQL server.

`server` routes each statement (queries on tables to the engine, as REST; boilerplate answered
here), `transport` the connection (TLS, framing limits, COPY), `cursors` and `copy_out` those
protocol features, `text` what the routers match, `catalog` drivers' catalog queries, run on the
sealed, data-free engine of `pg_catalog`."""
