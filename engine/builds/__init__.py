"""Builds: how a table's synopsis is measured, once, and a growing table's periods appended.

`steps` plans a build (shares, sensitivities), reads the true aggregates through `storage`, measures
them with a `privacy` strategy and stores the release; `preview` says what a registration would
cost before anything is charged; `growing` and `appends` are the periods of a table that grows;
`locks` serialize builds across processes; `faults` are the test-only kill points of the
crash-safety tests."""
