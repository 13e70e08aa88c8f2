"""`python -m eagle_probe …` behaves like the `eagle-probe` command."""

from eagle_probe.cli import entry

if __name__ == "__main__":
    entry()
