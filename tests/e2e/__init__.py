"""End-to-end tests: real servers, subprocesses, the command line and the installed package."""
