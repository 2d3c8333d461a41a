"""Organizations, teams, their keys, closed-beta switches and custom provider credentials."""
