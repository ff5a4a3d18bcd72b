package postgres

// ListMarkedSQL is the statement of ListMarked, for a test of its plan.
var ListMarkedSQL = listMarkedSQL
