"""`python -m fairbench.cli`: the `fairbench` command."""

from fairbench.cli import main

if __name__ == "__main__":
    main()
