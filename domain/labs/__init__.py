"""Lab testing: the catalogs (labs, markers), the team's lab tests, orders and results."""
