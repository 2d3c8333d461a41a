"""Fakes of the makers' clouds, shipped as a sandbox: real HTTP servers on localhost that
serve the makers' documented endpoints for a few synthetic people (docs/makers/)."""
