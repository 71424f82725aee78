"""Workflows of several steps built on the runner and the report: `tune` (search, select,
re-run on fresh seeds, report) and `bench` (timing steps, fits and whole figure runs).

Above both, so that neither the runner nor the report needs to import the other.
"""
