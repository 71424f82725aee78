"""Example plugins. A regular package (not a namespace one) so that `examples.fair_dp_logreg`
resolves here from the repository root: opacus installs a top-level `examples` package too."""
