"""`python -m eagle_probe …` behaves like the `eagle-probe` command."""

from eagle_probe.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
