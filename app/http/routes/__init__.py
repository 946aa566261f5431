"""One router per resource: queries, the analyst's table views, admin, and operations."""
